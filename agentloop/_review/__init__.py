"""Reviewing runs: run files and their replay, diagrams, the HTML report."""

from __future__ import annotations
