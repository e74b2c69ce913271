"""Durable runs: the ledger, resume after a kill, approval across processes, damaged records."""
