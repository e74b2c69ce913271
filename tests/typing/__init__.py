"""What type checkers make of the public API: ``assert_type`` under mypy and pyright.

``make check`` runs both over these modules (mypy over every test, pyright over
this folder); pytest runs them too, so each example holds at run time.
"""

from __future__ import annotations
