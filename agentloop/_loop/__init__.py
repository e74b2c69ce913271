"""The ``Loop``: its configuration, and each run it begins, resumes, forks or continues.

``loop.py`` is the ``Loop``; ``settings.py`` checks what it is given;
``engines.py`` makes each run's engine (fresh, resumed or forked) and
``running.py`` hands it to its driver; ``continued.py`` resumes, forks and
continues runs; ``fallback.py`` is the models a run asks in turn;
``owner.py`` opens and closes what a Loop owns (``owns=``).
"""

from __future__ import annotations
