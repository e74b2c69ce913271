"""Each feature's rows, with the guards and effects they name, one module a feature.

``basic.py`` (every run's rows), ``output.py`` (typed output),
``loopguard.py`` (``max_identical_calls``), ``wrapup.py``
(``on_exhausted='answer'``), ``context.py`` (context policies), ``retry.py``
(retries and fallback models) and ``review.py`` (policies and a person's
decisions). Each guard and effect is a function of the run's state
(``_core/state.py``), registered against its member (``_core/register.py``).
"""

from __future__ import annotations
