"""What the stages of a turn (the judge, the tool stage) ask of the run they serve."""

from __future__ import annotations

from typing import Any, Protocol

from subagent._context import RunContext
from subagent._hooks import Hooks
from subagent._live import LiveRun
from subagent._parts import AgentParts
from subagent.llm import ToolCall
from subagent.observe._observer import Observer
from subagent.tools._execute import ToolRun

__all__ = ["InFlight", "RunHost"]

InFlight = tuple[list[ToolCall], list[ToolRun | None]]
"""The calls of a tool turn under way and what has come back, for a turn cut short."""


class RunHost(Protocol):
    """The run a turn's stages work for."""

    parts: AgentParts
    live: LiveRun
    observer: Observer
    hooks: Hooks
    in_flight: InFlight | None

    def run_context(self) -> RunContext[Any]:
        """The :class:`~subagent.RunContext` of the turn under way."""
        ...

    def enter_user_code(self) -> Any:
        """Before a tool or a validator runs (a token for :meth:`leave_user_code`)."""
        ...

    def leave_user_code(self, token: Any) -> None:
        """After it ran."""
        ...
