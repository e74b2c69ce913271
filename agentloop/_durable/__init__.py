"""Durable runs: the ledger protocol, its SQLite store, and the recording driver around the engine.

``_ledger.py`` says what a store must do; ``_sqlite.py`` is the store that
ships (stdlib ``sqlite3``, WAL); ``_key.py`` hands a tool handler its
idempotency key; ``_journal.py`` records a run as the drivers drive it
(every report committed before the engine takes it); ``_resume.py`` feeds a
recorded run through a fresh engine and hands it back to a driver.
"""
