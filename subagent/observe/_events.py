"""Typed run events, and the ``on_event`` observer that delivers them to a callback.

A run reports ``RunStarted``, then for each turn ``TurnStarted``, ``ToolCallStarted`` /
``ToolCallEnded`` per tool call and ``TurnEnded`` (which carries the :class:`~subagent.Turn`
record), then ``RunEnded`` with the :class:`~subagent.Step`. ``stream()`` also delivers the
reply's ``TextDelta`` and ``ReasoningDelta`` pieces, and ``CallRetried`` when a call is sent
again (its pieces so far are then to be discarded). They carry the same facts as the spans.

``PartialOutput`` is not a run event: ``AgentRun.stream_output()`` reads it from the
stream's ``TextDelta`` pieces, in the consumer's task (see :mod:`subagent.observe._partial`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeAlias

from typing_extensions import TypeVar

from subagent._errors import blame_callback
from subagent.llm import ToolCall, TransportRetry
from subagent.observe._observer import (
    Observer,
    RunScope,
    ToolScope,
    TurnScope,
    TurnStart,
    refuse_awaitable,
)
from subagent.records import FailReason, Step, ToolResult, Turn, TurnOutcome, TurnType

__all__ = [
    "CallRetried",
    "EventHandler",
    "EventObserver",
    "PartialOutput",
    "ReasoningDelta",
    "RunEnded",
    "RunEvent",
    "RunStarted",
    "TextDelta",
    "ToolCallEnded",
    "ToolCallStarted",
    "TurnEnded",
    "TurnStarted",
]

OutputT = TypeVar("OutputT", default=Any)


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
    """A turn finished: ``turn`` is its record (also kept in ``Step.turns``).

    The record's most read fields are also properties of the event.
    """

    agent: str
    turn: Turn

    @property
    def index(self) -> int:
        """The 1-based turn number."""
        return self.turn.index

    @property
    def type(self) -> TurnType:
        """The phase the turn started in."""
        return self.turn.type

    @property
    def outcome(self) -> TurnOutcome:
        """What the turn came to."""
        return self.turn.outcome

    @property
    def phase_after(self) -> str:
        """The phase the run moved to."""
        return self.turn.phase_after

    @property
    def work_remaining(self) -> int:
        """Work turns left after the turn."""
        return self.turn.work_remaining

    @property
    def retries_remaining(self) -> int:
        """Correction turns left after the turn."""
        return self.turn.retries_remaining

    @property
    def error(self) -> str | None:
        """What was wrong with the turn, if anything."""
        return self.turn.error

    @property
    def stop_reason(self) -> str | None:
        """The reply's normalised stop reason, if there was a reply."""
        reason = self.turn.stop_reason
        return reason.value if reason is not None else None

    @property
    def duration_s(self) -> float:
        """Wall-clock seconds of the turn."""
        return self.turn.duration_s


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of the reply's text, as it streams in (``stream()`` only)."""

    agent: str
    index: int
    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """A piece of the reply's reasoning, as it streams in (``stream()`` only)."""

    agent: str
    index: int
    text: str


@dataclass(frozen=True, slots=True)
class CallRetried:
    """The turn's model call failed and is sent again (``stream()`` only).

    The deltas of turn ``index`` received so far came from the failed attempt: discard
    them, the reply streams again from its start. ``retry`` says why and how long the
    runtime waits (also recorded in ``Turn.transport_retries``).
    """

    agent: str
    index: int
    retry: TransportRetry


@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    """A tool call is about to run (the calls of one reply may run at once)."""

    agent: str
    index: int
    call: ToolCall


@dataclass(frozen=True, slots=True)
class ToolCallEnded:
    """A tool call returned; ``result`` is what the model will read (also on the Turn)."""

    agent: str
    index: int
    result: ToolResult


@dataclass(frozen=True, slots=True)
class RunEnded:
    """A run finished (``step.ok`` tells how)."""

    agent: str
    step: Step[Any]

    @property
    def failure_reason(self) -> FailReason | None:
        """Why the run failed, if it did."""
        return self.step.failure.reason if self.step.failure else None


@dataclass(frozen=True, slots=True)
class RunPaused:
    """A run paused: a reply called tools that need approval (``RunEnded`` follows).

    ``step.state`` is what to resume from; ``calls`` are the calls waiting for a decision.
    """

    agent: str
    step: Step[Any]

    @property
    def calls(self) -> list[ToolCall]:
        """The calls that need a decision."""
        pending = self.step.pending
        return [] if pending is None else pending.waiting


@dataclass(frozen=True, slots=True)
class PartialOutput(Generic[OutputT]):
    """The run's output as the reply of turn ``index`` holds it so far (``stream_output()``).

    Each one is the whole output read so far, not a piece to add: show the latest. A new
    ``index`` is a new reply (a correction starts over); after a ``CallRetried`` the same
    turn's reply starts over too. ``output`` is validated by the output type, partially: a
    string or a number at the end may still be growing, fields not reached yet have their
    defaults, the agent's ``validators`` have not seen it.

    Attributes:
        agent: The agent's name.
        index: The turn whose reply it was read from.
        output: The output so far, an instance of the agent's output type.
        final: Whether it is the run's output (``Step.output``), validated in full and by
            the validators: the last one of a run that ended done.
    """

    agent: str
    index: int
    output: OutputT
    final: bool = False


RunEvent: TypeAlias = (
    RunStarted
    | TurnStarted
    | TextDelta
    | ReasoningDelta
    | CallRetried
    | ToolCallStarted
    | ToolCallEnded
    | TurnEnded
    | RunPaused
    | RunEnded
)
"""Any event of a run: ``RunStarted``; per turn ``TurnStarted``, the reply's deltas and
retried calls (``stream()`` only), ``ToolCallStarted`` / ``ToolCallEnded`` per tool call and
``TurnEnded``; then ``RunEnded``, after ``RunPaused`` when the run paused for approval."""

EventHandler: TypeAlias = Callable[[RunEvent], None]
"""``run(on_event=...)``: a synchronous callable receiving each :data:`RunEvent` but the
deltas; it runs inside the turn loop, so it should be quick. An ``async def`` handler is
refused when the run is made (``ConfigurationError``); an exception it raises ends the run
and is raised out of it as it is, with the turns made so far in its ``turns`` attribute."""


class EventObserver(Observer):
    """``run(on_event=...)``: the run's events, handed to a callback as they happen.

    The observer is its own run, turn and tool scope (a run's turns are sequential, and a
    tool's result names its call); it has no chat scope, so it gets no deltas.
    """

    __slots__ = ("_agent", "_handler", "_index")

    def __init__(self, agent: str, handler: EventHandler):
        self._agent = agent
        self._handler = handler
        self._index = 0

    def _tell(self, event: RunEvent) -> None:
        """Hand ``event`` to the handler; its exception is raised out of the run as it is."""
        try:
            returned: object = self._handler(event)
        except Exception as exc:
            blame_callback(exc, "on_event")
            raise
        if returned is not None and inspect.isawaitable(returned):
            refuse_awaitable("on_event", returned)

    def run(
        self,
        max_turns: int,
        return_retries: int,
        phase: str,
        resumed: bool = False,
        first_part: str | None = None,
    ) -> RunScope:
        self._tell(RunStarted(self._agent, max_turns, return_retries, phase))
        return self

    def turn(self, start: TurnStart) -> TurnScope:
        self._index = start.index
        self._tell(
            TurnStarted(self._agent, start.index, start.type, start.type.value,
                        start.work_remaining, start.retries_remaining, start.tools_offered,
                        start.messages, start.collapsed, start.attempt, start.total)
        )  # fmt: skip
        return self

    def tool(self, call: ToolCall) -> ToolScope:
        self._tell(ToolCallStarted(self._agent, self._index, call))
        return self

    def __enter__(self) -> EventObserver:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None

    def finished(self, step: Step[Any]) -> None:
        if step.state is not None:
            self._tell(RunPaused(self._agent, step))
        self._tell(RunEnded(self._agent, step))

    def ended(self, turn: Turn) -> None:
        self._tell(TurnEnded(self._agent, turn))

    def returned(self, result: ToolResult) -> None:
        self._tell(ToolCallEnded(self._agent, self._index, result))
