"""``python -m agentloop`` and the ``agentloop`` script: the command line in ``agentloop._cli``."""

from __future__ import annotations

import sys

from agentloop._cli.main import DISTRIBUTION, main

__all__ = ["DISTRIBUTION", "main"]

if __name__ == "__main__":
    sys.exit(main())
