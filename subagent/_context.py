"""``RunContext``: what a tool, a validator or an instructions function may see of its run.

A function asks for it by annotating its first parameter ``RunContext`` (``RunContext[Db]``
types its ``deps``); that parameter is never part of a tool's schema. The context carries
the run's ``deps`` (the object the caller passed to ``run(deps=...)``) and where the run
is: the agent, the turn, the phase, the usage so far. ``deps`` is kept out of the
context's repr, and the runtime never puts it in a record, a span or JSON.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic

from typing_extensions import TypeVar

from subagent.llm import Usage

__all__ = ["RunContext", "takes_run_context"]

DepsT = TypeVar("DepsT", default=Any)


@dataclass(frozen=True, slots=True)
class RunContext(Generic[DepsT]):
    """The run a tool, a validator or an instructions function is called in.

    Ask for it with a first parameter annotated ``RunContext[Deps]``:
    ``def lookup(ctx: RunContext[Db], user_id: str) -> str``.

    Attributes:
        deps: The run's dependencies: the object passed to ``run(deps=...)`` (``None``
            when none was). Never in a repr, a record, a span or JSON.
        agent: The running agent's name.
        turn: The 1-based index of the turn under way (0 before the first turn: the
            ``instructions`` function).
        phase: The phase the turn started in (``normal``, ``must_return``, ``retry``).
        usage: Tokens spent so far: the run's own calls (the current turn's reply
            included) and the agents it ran as tools.
        tool_calls: Tool calls the run has made so far (the current turn's not included).
        depth: How deep the run is nested (0: a top-level run).
    """

    deps: DepsT = field(repr=False)
    agent: str
    turn: int
    phase: str
    usage: Usage = field(default_factory=Usage)
    tool_calls: int = 0
    depth: int = 0


_NAMED = re.compile(r"^\s*(?:[\w.]+\.)?RunContext\b")


def _is_run_context(annotation: object) -> bool:
    if isinstance(annotation, str):  # an annotation that could not be resolved
        return bool(_NAMED.match(annotation))
    return annotation is RunContext or typing.get_origin(annotation) is RunContext


def takes_run_context(function: Callable[..., Any]) -> bool:
    """Whether ``function``'s first parameter is annotated :class:`RunContext`.

    A ``functools.partial`` or a callable object is read through ``inspect.signature``; a
    function whose signature cannot be read takes none.
    """
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return False
    parameters = list(signature.parameters.values())
    if not parameters or parameters[0].kind not in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        return False
    first = parameters[0]
    annotation: object = first.annotation
    if isinstance(annotation, str):
        try:
            hints = typing.get_type_hints(function)
        except Exception:  # unresolved forward references: read the text
            hints = {}
        annotation = hints.get(first.name, annotation)
    return _is_run_context(annotation)
