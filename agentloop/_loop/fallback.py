"""Fallback models: the models a run asks in turn, when one fails for good.

``Fallback`` only names the models; the engine's ``fallback_left`` row decides
when to move on (a model's error is not retried, or its retries ran out), and
counts the move in the record, so ``engine.model_index`` says which model is
asked. ``per_run`` is the one model callable a driver calls, reading it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentloop._core.engine import Engine
from agentloop._drivers.callbacks import READS_RECORD, Model, is_async, reads_record

__all__ = ["Fallback", "fallback", "model_name", "per_run"]


class Fallback:
    """Models asked in turn: ``Loop(model=fallback(primary, secondary, ...))``.

    ``models`` and their ``names`` (each model's as events record it), in order.
    """

    __slots__ = ("models", "names")

    def __init__(self, models: tuple[Model, ...], names: tuple[str, ...]) -> None:
        self.models, self.names = models, names

    def __repr__(self) -> str:
        return f"fallback({', '.join(self.names)})"

    @property
    def is_async(self) -> bool:
        """Whether its models are ``async def`` ones (all or none are)."""
        return is_async(self.models[0])


def model_name(model: object) -> str:
    """What events call ``model``: an adapter's ``agentloop_name``, else its ``__name__``."""
    name = getattr(model, "agentloop_name", None) or getattr(model, "__name__", None)
    return name if type(name) is str else type(model).__name__


def fallback(*models: Model, names: Sequence[str] | None = None) -> Fallback:
    """The models a run asks in turn: the first until it fails for good, then the next.

    A model fails for good on an error its retry policy does not retry, or
    once its retries ran out; the run then asks the next model (with its
    attempts afresh), and fails only when the last one does. Every attempt is
    a step of the same run, so budgets count across all of them. Each event
    of a model says which one (``Transition.model``): by ``names`` if given,
    else the adapter's model name or the callable's ``__name__`` (made unique
    with ``#2``, ``#3``). All the models are plain, or all are ``async def``.
    """
    if len(models) < 2:
        raise ValueError(f"expected at least two models to fall back between, got {len(models)}")
    for index, model in enumerate(models):
        if not callable(model) or isinstance(model, Fallback):
            raise TypeError(
                f"expected models[{index}] to be a model callable, got {type(model).__name__}"
            )
    kinds = [is_async(model) for model in models]
    if len(set(kinds)) > 1:
        mix = ", ".join(
            f"models[{index}] ({model_name(model)}) is {'async def' if kind else 'plain'}"
            for index, (model, kind) in enumerate(zip(models, kinds, strict=True))
        )
        raise TypeError(
            "expected every model to be plain or every one async def (one driver asks them "
            f"all), got a mix: {mix}"
        )
    if names is None:
        given = [model_name(model) for model in models]
        seen: dict[str, int] = {}
        chosen = []
        for name in given:
            seen[name] = seen.get(name, 0) + 1
            chosen.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
        names = chosen
    names = tuple(names)
    if len(names) != len(models) or any(type(n) is not str or not n for n in names):
        raise ValueError(
            f"expected names to be {len(models)} non-empty strs, one a model, got {names!r:.80}"
        )
    if len(set(names)) != len(names):
        raise ValueError(f"expected names to differ, got {names!r:.80}")
    return Fallback(tuple(models), names)


def per_run(bound: tuple[Model, ...], engine: Engine, asynchronous: bool) -> Model:
    """The model a driver calls for ``engine``'s run: the one the run's record has come to."""
    if len(bound) == 1:
        return bound[0]
    # ``options``: the request's (tool_choice='none' in the wrap-up step), as to one model.
    ask: Model
    if asynchronous:

        async def ask_async(history: list[dict[str, Any]], **options: Any) -> object:
            return await bound[engine.model_index](history, **options)  # type: ignore[misc]

        ask = ask_async
    else:

        def ask_sync(history: list[dict[str, Any]], **options: Any) -> object:
            return bound[engine.model_index](history, **options)

        ask = ask_sync
    if all(map(reads_record, bound)):  # built-in adapters all: each is given the record
        setattr(ask, READS_RECORD, True)
    return ask
