"""Mermaid and DOT text for the state machine, generated from the table.

The edges are read from the same ``transitions`` machine the engine compiles,
so a diagram cannot show a row the engine does not run. Internal rows (which
keep the state) are drawn as self-loops, dashed in DOT.
"""

from __future__ import annotations

from agentloop._machine import TERMINAL, Row, State, build_machine, rows_of

__all__ = ["edges", "to_dot", "to_mermaid"]


def edges() -> list[Row]:
    """Every row of the table, in table order."""
    return list(rows_of(build_machine()))


def to_mermaid() -> str:
    """A Mermaid ``stateDiagram-v2`` of the machine."""
    lines = ["---", "title: agentloop", "---", "stateDiagram-v2"]
    lines.append(f"    [*] --> {State.AWAITING_MODEL.value}")
    for edge in edges():
        lines.append(f"    {edge.source} --> {edge.dest or edge.source}: {edge.label}")
    lines.extend(f"    {state.value} --> [*]" for state in State if state in TERMINAL)
    return "\n".join(lines) + "\n"


def to_dot() -> str:
    """A Graphviz DOT digraph of the machine; terminal states are double circles."""
    lines = [
        "digraph agentloop {",
        '    rankdir="TB";',
        '    node [shape="box", style="rounded"];',
        '    "__start__" [shape="point", label=""];',
    ]
    for state in State:
        shape = "doublecircle" if state in TERMINAL else "box"
        lines.append(f'    "{state.value}" [shape="{shape}"];')
    lines.append(f'    "__start__" -> "{State.AWAITING_MODEL.value}";')
    for edge in edges():
        dest = edge.dest if edge.dest is not None else edge.source
        style = ', style="dashed"' if edge.dest is None else ""
        lines.append(f'    "{edge.source}" -> "{dest}" [label="{edge.label}"{style}];')
    lines.append("}")
    return "\n".join(lines) + "\n"
