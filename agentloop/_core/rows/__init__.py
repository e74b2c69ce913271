"""The run's state (``state.py``) and each feature's guards and effects, named by the table.

``context.py`` (context policies), ``output.py`` (typed output, wrap-up, the
loop guard), ``retry.py`` (retries and fallback models) and ``review.py``
(policies and a person's decisions).
"""

from __future__ import annotations
