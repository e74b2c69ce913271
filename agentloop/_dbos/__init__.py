"""The private pieces of ``agentloop.dbos``: the step runner, the steps' work, the marker, the wait.

``agentloop.dbos`` is the public module (and the driver, ``DBOSLoop``);
these are imported by it only, after it has checked that DBOS is installed.
"""

from __future__ import annotations

__all__: list[str] = []
