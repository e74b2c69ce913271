"""agentloop's command line: run the demo, draw the machine, review saved runs and ledgers.

``_main.py`` parses and dispatches; ``_output.py`` writes (whole, escaped, or
exit 1 when the reader leaves); ``_files.py`` serves the demo, diagrams and
run files; ``_ledger.py`` the runs of a ledger: listed, shown, their pending
calls, and a person's decisions; ``_dbos.py`` the same commands on a DBOS
system database URL. ``agentloop.__main__`` runs ``main``.
"""
