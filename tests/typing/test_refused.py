"""Lines both type checkers must refuse: each carries mypy's and pyright's ignore comment.

mypy --strict reports an ignore it does not need (``warn_unused_ignores``), and
pyright, which reads only its own comments here, does too
(``reportUnnecessaryTypeIgnoreComment``): a line either checker accepted would
fail ``make check``. pytest runs what is safe to run, to show each refusal is
the checker's, not the run's.
"""

from __future__ import annotations

import attrs
import pytest

from agentloop import Loop, RunResult
from agentloop.testing import ScriptedModel, final


@attrs.frozen
class City:
    """A city and its population."""

    name: str
    population: int


def paris() -> Loop[City]:
    return Loop(ScriptedModel([final('{"name": "Paris", "population": 2100000}')]), output=City)


def test_an_output_is_read_only_once_the_run_is_known_to_have_one() -> None:
    result = paris().run("Biggest city?")
    name = result.output.name  # type: ignore[union-attr]  # pyright: ignore[reportOptionalMemberAccess]
    assert name == "Paris"
    city: City = result.output  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]
    assert city == result.require_output()


def test_a_result_is_not_of_another_output() -> None:
    text: str = paris().run("x").require_output()  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]
    assert isinstance(text, City)
    typed: RunResult[str] = paris().run("x")  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]
    assert typed.output is not None


def test_a_loop_is_of_the_output_it_was_made_with() -> None:
    loop: Loop[City] = Loop(ScriptedModel([]))  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]
    assert loop.output is None


def test_a_keyword_loop_does_not_take_is_refused_with_or_without_output() -> None:
    with pytest.raises(TypeError):
        Loop(ScriptedModel([]), output=City, max_step=3)  # type: ignore[call-overload]  # pyright: ignore[reportCallIssue]
    with pytest.raises(TypeError):
        Loop(ScriptedModel([]), max_steps="3")  # type: ignore[call-overload]  # pyright: ignore[reportArgumentType]
