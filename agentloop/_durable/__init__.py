"""Durable runs: the ledger protocol, its SQLite store, and the recording engine.

``protocol.py`` says what a store must do; ``sqlite.py`` is the store that
ships (stdlib ``sqlite3``, WAL), with ``files.py`` (what its files must be),
``connection.py`` (what a failure of SQLite means) and ``lockfile.py`` (one
writer per run); ``key.py`` hands a tool handler
its idempotency key. A run's record is its events, as run files encode them:
``journal.py`` writes its records, ``recording.py`` is the engine that
commits each transition before the driver acts on it, ``records.py`` reads
them back, and ``resume.py`` feeds them to the one replay and hands the
engine to a driver. ``bodies.py`` encodes a reply or a call's outcome as
DBOS's steps keep it.
``view.py`` reads a run without running it, and records a person's decisions.
"""
