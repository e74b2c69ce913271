"""``python -m agentloop``: the command line (``demo``, ``diagram``)."""

from __future__ import annotations

import argparse
import sys

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run one command; returns the exit code."""
    parser = argparse.ArgumentParser(prog="agentloop", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="run the built-in scripted scenario step by step")
    diagram = commands.add_parser("diagram", help="print the state machine as a diagram")
    diagram.add_argument("--format", choices=("mermaid", "dot"), default="mermaid")
    args = parser.parse_args(argv)

    if args.command == "demo":
        from agentloop._demo import run_demo

        result = run_demo()
        return 0 if result.status == "finished" else 1
    from agentloop._diagram import to_dot, to_mermaid

    sys.stdout.write(to_mermaid() if args.format == "mermaid" else to_dot())
    return 0


if __name__ == "__main__":
    sys.exit(main())
