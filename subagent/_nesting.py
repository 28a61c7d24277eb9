"""The run in progress in this task: its model, tracer provider and nesting depth.

An agent used as a tool of another agent runs on its parent's model, traces into its
parent's provider, and knows how deep it is. The loop marks itself as the run in progress
only around the code that may start a run (a tool, a validator), not for the whole run: a
run waiting on its model holds no context of its own.
"""

from __future__ import annotations

import contextvars

from opentelemetry.trace import TracerProvider

from subagent.llm import LLM

__all__ = ["current_depth", "current_run_model", "enter_run", "leave_run"]

_Current = tuple[LLM, TracerProvider | None, int]
_CURRENT: contextvars.ContextVar[_Current | None] = contextvars.ContextVar(
    "subagent_current_run", default=None
)


def current_run_model() -> tuple[LLM | None, TracerProvider | None]:
    """The model and tracer provider of the run in progress in this task, if any."""
    current = _CURRENT.get()
    return (None, None) if current is None else (current[0], current[1])


def current_depth() -> int:
    """How deep the run in progress is nested (0: a top-level run; -1: no run)."""
    current = _CURRENT.get()
    return -1 if current is None else current[2]


def enter_run(
    llm: LLM, provider: TracerProvider | None, depth: int
) -> contextvars.Token[_Current | None]:
    """Make a run the one that runs started from here nest in; undo with :func:`leave_run`."""
    return _CURRENT.set((llm, provider, depth))


def leave_run(token: contextvars.Token[_Current | None]) -> None:
    """Undo :func:`enter_run`."""
    _CURRENT.reset(token)
