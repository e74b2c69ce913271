"""The drivers: the loops that call the model and the tools around the engine.

``transition.py`` is the one transition every driver pumps, the loop that
pumps it with plain calls, and the read-only view of a run; ``sync.py``
(``Run``) pumps it with that loop, ``asyncio.py`` (``AsyncRun``) with
awaits. Beside them: how a stream is read (``streams.py``) and what it
yields (``deltas.py``), the synchronous run's own event loop
(``awaiter.py``), a batch's calls run at once (``concurrent.py``,
``tool_calls.py``), the wait before a retry (``waits.py``), a tool's
progress (``progress.py``) and the callables' types (``callbacks.py``).
Nothing here knows the ``Loop``.
"""

from __future__ import annotations
