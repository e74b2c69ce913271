"""agentloop's command line: run the demo, draw the machine, review saved runs and ledgers.

``main.py`` parses and dispatches; ``printing.py`` writes (whole, escaped, or
exit 1 when the reader leaves); ``file_commands.py`` serves the demo, diagrams and
run files; ``ledger_commands.py`` the runs of a ledger: listed, shown, their pending
calls, and a person's decisions; ``dbos_commands.py`` the same commands on a DBOS
system database URL. ``agentloop.__main__`` runs ``main``.
"""
