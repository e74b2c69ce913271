"""The core: values, messages, the state table and the engine. No I/O."""

from __future__ import annotations
