"""The tool registry: schemas from signatures, validation, policies, results, provider specs."""

from __future__ import annotations
