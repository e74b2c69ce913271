"""The DBOS driver: ``DBOSLoop`` (``dbos_loop.py``), runs as DBOS workflows, and its parts.

The DBOSLoops of the process by name and the run workflow
(``loops.py``), the step runner (``steps.py``), each step's work
(``work.py``), the cancel marker (``marker.py``), the wait for a person
(``decisions.py``), conversations (``turns.py``), agent calls' child
workflows (``child_workflows.py``; in a fork of their parent,
``forks.py``) and the runs below a run that have not ended
(``descendants.py``: what ``pending``, ``decide`` and ``cancel_run`` reach).
``agentloop.dbos`` is the public module; it checks that DBOS is installed
before it imports anything here.
"""

from __future__ import annotations

__all__: list[str] = []
