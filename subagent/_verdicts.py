"""What the runtime made of one turn: a verdict, one small record per kind.

The judge and the tool stage return a verdict; the loop applies it with one ``match``: the
verdict's trigger moves the state table, and its kind says what the next turn needs (an
output, a failure, a tool exchange kept in the context, or feedback about a failed attempt).

=============  ============  =========  ================================================
verdict        trigger       outcome    when
=============  ============  =========  ================================================
Answered       returned      success    a valid return (a reply, or a tool's final value)
GaveUp         gave_up       fail       the model's explicit fail
Missed         missed        error      an invalid return, a cut reply, a refused call
ToolsRan       used_tools    continue   a tool turn (``error`` when a call failed or a
                                        final value was invalid: fed back)
Paused         needs_approval paused    a call needs approval: nothing ran
Ended          (its own)     fail       a failed call, a limit, a lost tool server
=============  ============  =========  ================================================
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from subagent._errors import ErrorKind
from subagent._phases import Trigger
from subagent.llm import Message, ToolCall
from subagent.records import ToolResult, TurnOutcome

__all__ = [
    "Answered",
    "Ended",
    "GaveUp",
    "Missed",
    "Paused",
    "ToolsRan",
    "Verdict",
    "error_summary",
]

_NO_RESULTS: tuple[ToolResult, ...] = ()


@dataclass(slots=True)
class Answered:
    """A valid return: the run is done with ``output``."""

    output: Any
    calls: list[ToolCall] | None = None
    results: Sequence[ToolResult] = _NO_RESULTS
    trigger: ClassVar[Trigger] = Trigger.RETURNED
    outcome: ClassVar[TurnOutcome] = TurnOutcome.SUCCESS
    error: ClassVar[None] = None
    error_type: ClassVar[None] = None
    summary: ClassVar[None] = None


@dataclass(slots=True)
class GaveUp:
    """The model's explicit fail, with its reason."""

    error: str
    trigger: ClassVar[Trigger] = Trigger.GAVE_UP
    outcome: ClassVar[TurnOutcome] = TurnOutcome.FAIL
    error_type: ClassVar[str] = "explicit_fail"
    calls: ClassVar[None] = None
    results: ClassVar[tuple[ToolResult, ...]] = _NO_RESULTS
    summary: ClassVar[None] = None


@dataclass(slots=True)
class Missed:
    """A turn that did not return: what was wrong is fed back to the model."""

    error: str
    error_type: str
    summary: str | None = None
    calls: list[ToolCall] | None = None
    results: Sequence[ToolResult] = _NO_RESULTS
    trigger: ClassVar[Trigger] = Trigger.MISSED
    outcome: ClassVar[TurnOutcome] = TurnOutcome.ERROR


@dataclass(slots=True)
class ToolsRan:
    """A tool turn: its exchange stays in the context; failed calls are fed back.

    ``final_invalid``: an invalid final value of a tool, its tool's name and the error, for
    the feedback after the exchange (worded once the next phase is known).
    """

    calls: list[ToolCall]
    results: Sequence[ToolResult]
    exchange: list[Message]
    error: str | None = None
    error_type: str | None = None
    summary: str | None = None
    final_invalid: tuple[str, str] | None = None
    trigger: ClassVar[Trigger] = Trigger.USED_TOOLS

    @property
    def outcome(self) -> TurnOutcome:
        """``continue``, or ``error`` when something of the turn is fed back as wrong."""
        return TurnOutcome.CONTINUE if self.error is None else TurnOutcome.ERROR


@dataclass(slots=True)
class Paused:
    """A reply calling tools that need approval: the run pauses before any call runs."""

    calls: list[ToolCall]
    waiting: list[str]
    trigger: ClassVar[Trigger] = Trigger.NEEDS_APPROVAL
    outcome: ClassVar[TurnOutcome] = TurnOutcome.PAUSED
    error: ClassVar[None] = None
    error_type: ClassVar[None] = None
    results: ClassVar[tuple[ToolResult, ...]] = _NO_RESULTS
    summary: ClassVar[None] = None


@dataclass(slots=True)
class Ended:
    """A turn that ends the run for a reason of its own (its trigger's row fails it)."""

    trigger: Trigger
    error: str
    error_type: str
    error_kind: ErrorKind | None = None
    calls: list[ToolCall] | None = None
    results: Sequence[ToolResult] = field(default=_NO_RESULTS)
    summary: str | None = None
    outcome: ClassVar[TurnOutcome] = TurnOutcome.FAIL


Verdict = Answered | GaveUp | Missed | ToolsRan | Paused | Ended


def error_summary(verdict: Verdict) -> str | None:
    """What was wrong with a turn, without text from the model or a tool (for traces)."""
    if verdict.error is None:
        return None
    kind = verdict.error_type or verdict.outcome.value
    if verdict.summary:
        return f"{kind}: {verdict.summary}"
    if kind == "tool_error":
        failed = [result for result in verdict.results if not result.ok]
        over = sum(result.error_type == "too_many_calls" for result in failed)
        parts = [
            f"{'(unknown tool)' if r.error_type == 'unknown_tool' else r.name} {r.error_type}"
            for r in failed
            if r.error_type != "too_many_calls"
        ]
        if over:
            parts.append(f"{over} call(s) too_many_calls")
        return "tool_error: " + ", ".join(parts)
    if kind == "tools_unavailable":
        return f"tools_unavailable: {len(verdict.results)} call(s) refused"
    return kind
