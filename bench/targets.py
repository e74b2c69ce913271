"""How a bench prints a target: the measured value beside the limit, PASS or MISS.

A target the library meets is enforced: a MISS fails the bench, and with it
``make bench``, which fails on any bench's non-zero exit. A target an issue has
still to meet is open: printed the same way, marked with its issue, it never
fails the bench, so that ``make bench`` keeps telling a regression from work
not done yet. The library change that meets an open target enforces it.
"""

from __future__ import annotations


def verdict(
    label: str,
    measured: float,
    limit: float,
    shown: str,
    *,
    open_in: str = "",
    at_least: bool = False,
) -> bool:
    """Print ``label``, ``shown`` (the measured value) and PASS or MISS (``measured <= limit``,
    or ``>=`` with ``at_least``); whether the bench may still pass: met, or open in the issue
    ``open_in`` names."""
    met = measured >= limit if at_least else measured <= limit
    mark = f" (open: {open_in})" if open_in else ""
    print(f"  {label:<46} {shown:>22}  {'PASS' if met else 'MISS'}{mark}")
    return met or bool(open_in)
