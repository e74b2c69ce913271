"""The one home of what the tests share: tools and models, the loopback wire, ledgers and
records, and the processes they start (each a module here, run with ``python -m``)."""

from __future__ import annotations

from pathlib import Path
from typing import Final

#: This package's folder: the scripts the tests start, and the MCP peers' npm project.
SUPPORT: Final = Path(__file__).resolve().parent
#: The repository's root.
ROOT: Final = SUPPORT.parent.parent
#: The committed fixtures: records in each format version this agentloop reads.
FIXTURES: Final = ROOT / "tests" / "fixtures"
