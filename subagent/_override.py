"""``agent.override(...)``: an agent's model, deps, tools or instructions, replaced.

Inside a ``with`` block, for tests.

The replacement lives in a context variable: it reaches every run of that agent started in
the block, in the tasks the block starts and in the runs those runs start (an agent called
as a tool of another), and nothing outside it, so two tests running at once each keep
their own. Inside the block it wins over what the agent was built with and over what a run
is given (``llm=``, ``deps=``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from subagent.llm import LLM

__all__ = ["Override", "active_override", "overriding"]

NOT_GIVEN: Any = object()
"""An override that leaves its part as the agent has it."""


@dataclass(frozen=True, slots=True)
class Override:
    """What a block replaces for one agent.

    Attributes:
        agent: The agent whose runs it changes (compared by identity).
        llm: The model its runs call, or ``None``.
        deps: The deps its runs get, or :data:`NOT_GIVEN`.
        runs_as: The agent its runs are made by instead (its tools or instructions
            replaced), or ``None``.
    """

    agent: object
    llm: LLM | None = None
    deps: Any = NOT_GIVEN
    runs_as: object | None = None


# Innermost block first.
_OVERRIDES: ContextVar[tuple[Override, ...]] = ContextVar("subagent_overrides", default=())


def active_override(agent: object) -> Override | None:
    """The innermost override of ``agent`` (or of the agent it runs as) in this context."""
    for override in _OVERRIDES.get():
        if override.agent is agent or override.runs_as is agent:
            return override
    return None


@contextmanager
def overriding(override: Override) -> Iterator[None]:
    """Apply ``override`` inside the block."""
    token = _OVERRIDES.set((override, *_OVERRIDES.get()))
    try:
        yield
    finally:
        _OVERRIDES.reset(token)
