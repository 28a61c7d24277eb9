"""Typed run events, for observers that do not use OpenTelemetry (``on_event``).

They carry the same fields as the spans: ``RunStarted``, then for each turn
``TurnStarted``/``TurnEnded``, then ``RunEnded`` with the :class:`~subagent.Step`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeAlias

from subagent._records import FailReason, Step, TurnOutcome, TurnType

__all__ = ["EventHandler", "RunEnded", "RunEvent", "RunStarted", "TurnEnded", "TurnStarted"]


@dataclass(frozen=True, slots=True)
class RunStarted:
    """A run began."""

    agent: str
    max_turns: int
    return_retries: int
    phase: str


@dataclass(frozen=True, slots=True)
class TurnStarted:
    """A turn is about to call the model.

    Attributes:
        attempt: The correction attempt (1-based) on ``retry`` turns, else ``None``.
        total: The correction budget on ``retry`` turns, else ``None``.
    """

    agent: str
    index: int
    type: TurnType
    phase: str
    work_remaining: int
    retries_remaining: int
    tools_offered: int
    messages: int
    collapsed: int
    attempt: int | None = None
    total: int | None = None


@dataclass(frozen=True, slots=True)
class TurnEnded:
    """A turn finished; ``error`` says what was wrong with it, if anything."""

    agent: str
    index: int
    type: TurnType
    outcome: TurnOutcome
    phase_before: str
    phase_after: str
    work_remaining: int
    retries_remaining: int
    error: str | None
    stop_reason: str | None
    duration_s: float


@dataclass(frozen=True, slots=True)
class RunEnded:
    """A run finished (``step.ok`` tells how)."""

    agent: str
    step: Step[Any]

    @property
    def failure_reason(self) -> FailReason | None:
        """Why the run failed, if it did."""
        return self.step.failure.reason if self.step.failure else None


RunEvent: TypeAlias = RunStarted | TurnStarted | TurnEnded | RunEnded
"""Any event of a run, in the order ``RunStarted``, per turn ``TurnStarted``/``TurnEnded``,
then ``RunEnded``."""

EventHandler: TypeAlias = Callable[[RunEvent], None]
"""``run(on_event=...)``: a synchronous callable receiving each :data:`RunEvent`; it runs
inside the turn loop, so it should be quick."""
