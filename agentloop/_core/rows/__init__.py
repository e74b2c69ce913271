"""Each feature's rows, with the guards and effects they name, one module a feature.

``basic.py`` (every run's rows), ``output.py`` (typed output),
``loopguard.py`` (``max_identical_calls``), ``wrapup.py``
(``on_exhausted='answer'``), ``context.py`` (context policies), ``retry.py``
(retries and fallback models), ``review.py`` (policies and a person's
decisions), ``handoff.py`` (a team of agents) and ``nested_approval.py`` (a call
whose child run waits for a person). Each guard and effect is a
function of the run's state (``_core/state.py``), registered against its member
(``_core/register.py``). A module's functions come first and its rows
(``ROWS``) last, naming them, or the basic rows' own, imported: the rows of a
feature import from ``basic.py`` (and the wrap-up's from ``context.py``), and
``basic.py`` from none of them (the review's from ``nested_approval.py``, which
keeps its decisions about children's calls).
"""

from __future__ import annotations
