"""agentloop's command line: run the demo, draw the machine, review saved runs and ledgers.

``_main.py`` parses and dispatches; ``_output.py`` writes (whole, or exit 1
when the reader leaves); ``_files.py`` serves the demo, diagrams and run
files; ``_ledger.py`` the runs of a ledger: listed, shown, their pending
calls, and a person's decisions. ``agentloop.__main__`` runs ``main``.
"""
