"""Durable runs: the ledger protocol, its SQLite store, and the recording driver around the engine.

``_ledger.py`` says what a store must do; ``_sqlite.py`` is the store that
ships (stdlib ``sqlite3``, WAL), with ``_files.py`` (what its files must be)
and ``_lockfile.py`` (one writer per run); ``_key.py`` hands a tool handler
its idempotency key; ``_journal.py`` records a run as the drivers drive it
(every report committed before the engine takes it); ``_resume.py`` feeds a
recorded run through a fresh engine and hands it back to a driver;
``_view.py`` reads a run without running it, and records a person's decisions.
"""
