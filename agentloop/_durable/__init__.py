"""Durable runs: the ledger protocol, its SQLite store, and the recording engine.

``_ledger.py`` says what a store must do; ``_sqlite.py`` is the store that
ships (stdlib ``sqlite3``, WAL), with ``_files.py`` (what its files must be)
and ``_lockfile.py`` (one writer per run); ``_key.py`` hands a tool handler
its idempotency key. A run's record is its events, as run files encode them:
``_journal.py`` writes its records, ``_recording.py`` is the engine that
commits each transition before the driver acts on it, ``_records.py`` reads
them back, and ``_resume.py`` feeds them to the one replay and hands the
engine to a driver. ``_legacy.py`` reads the first release's ledgers, and
``_bodies.py`` is their reports' encoding (DBOS's steps keep it).
``_view.py`` reads a run without running it, and records a person's decisions.
"""
