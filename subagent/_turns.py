"""The one place a :class:`~subagent.Turn` record is built.

A turn under way is a :class:`TurnDraft`: what it started with (its :class:`TurnStart`,
the phase, the clock) and what came back (the reply, the transport retries). It ends in one
of three ways, each recorded here from the same draft: it finished (its verdict applied),
it was cut short (a cancellation: a stop, a timeout), or a bug in user code ended it (a
parser, a validator, a template, a model breaking its protocol). The last two keep the
reply and the calls and results of a tool turn, so the error raised carries the turn that
caused it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from subagent._phases import Budget, Phase
from subagent._text import scrub_surrogates
from subagent._verdicts import Verdict, error_summary
from subagent.llm import LLM, LLMResponse, ToolCall, TransportRetry
from subagent.observe._observer import TurnStart
from subagent.records import Decision, ToolResult, Turn, TurnOutcome, TurnType
from subagent.records._messages import trusted
from subagent.tools._execute import ToolRun

__all__ = ["CUT_SHORT", "NO_RETRIES", "TurnDraft", "ended_by", "interrupted", "said"]

CUT_SHORT = "cancelled before the turn completed"
NO_RETRIES: list[TransportRetry] = []  # shared while a turn has none; never appended to
_TURN_FIELDS = set(Turn.model_fields)
_NO_USAGE = LLMResponse.model_fields["usage"].get_default(call_default_factory=True)
_NO_DECISIONS: Mapping[str, Decision] = {}


@dataclass(slots=True)
class TurnDraft:
    """A turn under way: what it started with and what came back so far.

    Attributes:
        start: What the observer was told when the turn started.
        phase: The phase the turn started in.
        started: When it started (``time.perf_counter()``); earlier for a resumed turn, by
            what its first part took.
        response: The reply, once it came.
        retries: The transport retries of its call (appended by the call stage).
        decisions: The decisions a resumed turn went on with.
        llm: The model the turn calls (``None``: a resumed turn calls none).
        model: Its name (a reply may name another: a fallback's member that answered).
        corrected: Whether the turn is sent with the run's correction settings.
        output_mode: How the answer is asked for, when not in the prompt alone.
        earlier: The run's turns before it (a correction's reply is compared with every
            refused reply among them).
    """

    start: TurnStart
    phase: Phase
    started: float
    response: LLMResponse | None = None
    retries: list[TransportRetry] = field(default_factory=lambda: NO_RETRIES)
    decisions: Mapping[str, Decision] = field(default_factory=lambda: _NO_DECISIONS)
    llm: LLM | None = None
    model: str | None = None
    corrected: bool = False
    output_mode: str | None = None
    earlier: Sequence[Turn] = ()

    def retried(self, retry: TransportRetry) -> None:
        """Keep one transport retry of the turn's call."""
        if self.retries is NO_RETRIES:
            self.retries = []
        self.retries.append(retry)

    def finished(self, verdict: Verdict, feedback: str | None, budget: Budget) -> Turn:
        """The record of a turn whose verdict was applied (``budget`` moved already)."""
        error = verdict.error
        calls = verdict.calls
        return self._record(
            outcome=verdict.outcome,
            phase_after=budget.state,
            calls=[] if calls is None else calls,
            results=verdict.results,
            error=None if error is None else scrub_surrogates(error),
            error_type=verdict.error_type,
            summary=error_summary(verdict),
            feedback=None if feedback is None else scrub_surrogates(feedback),
            left=(budget.work_remaining, budget.retries_remaining),
        )

    def cut_short(self, calls: Sequence[ToolCall], results: Sequence[ToolResult]) -> Turn:
        """The record of a turn a cancellation ended (it counts as taken)."""
        return self._record(
            outcome=TurnOutcome.FAIL, phase_after=self.phase.value, calls=list(calls),
            results=results, error=CUT_SHORT, error_type="cancelled", summary=CUT_SHORT,
            feedback=None, left=self.start.left_if_cut_short,
        )  # fmt: skip

    def broken(
        self,
        error: BaseException,
        budget: Budget,
        calls: Sequence[ToolCall],
        results: Sequence[ToolResult],
    ) -> Turn:
        """The record of a turn a bug in user code ended (raised out of the run with it)."""
        kind = type(error).__name__
        return self._record(
            outcome=TurnOutcome.FAIL, phase_after=self.phase.value, calls=list(calls),
            results=results, error=scrub_surrogates(f"{kind}: {error}"), error_type=kind,
            summary=kind, feedback=None, left=(budget.work_remaining, budget.retries_remaining),
        )  # fmt: skip

    def _record(
        self,
        *,
        outcome: TurnOutcome,
        phase_after: str,
        calls: list[ToolCall],
        results: Sequence[ToolResult],
        error: str | None,
        error_type: str | None,
        summary: str | None,
        feedback: str | None,
        left: tuple[int, int],
    ) -> Turn:
        # Every value is of its type already; text quoting the model or a tool was scrubbed
        # of lone surrogates by the caller (the reply's text when it was received).
        response = self.response
        start = self.start
        return trusted(Turn, _TURN_FIELDS, {
            "index": start.index, "type": start.type, "outcome": outcome,
            "phase_after": phase_after,
            "reply": "" if response is None else response.text,
            "reasoning": "" if response is None else response.reasoning,
            "tool_calls": calls, "tool_results": list(results),
            "error": error, "error_type": error_type, "error_summary": summary,
            "feedback": feedback,
            "stop_reason": None if response is None else response.stop_reason,
            "raw_stop_reason": None if response is None else response.raw_stop_reason,
            "usage": _NO_USAGE if response is None else response.usage,
            "messages_sent": start.messages, "messages_collapsed": start.collapsed,
            "work_remaining": left[0], "retries_remaining": left[1],
            "transport_retries": self.retries,
            "duration_s": time.perf_counter() - self.started,
            "decisions": dict(self.decisions), "model": self._answered_by(),
            "corrected": self.corrected, "output_mode": self.output_mode,
            "repeated": self._repeated(),
        })  # fmt: skip

    def _answered_by(self) -> str | None:
        """The model that produced the reply (a fallback's member), else the one called."""
        response = self.response
        if response is None or response.model_name is None:
            return self.model
        return response.model_name

    def _repeated(self) -> bool:
        """Whether this correction's reply is a reply the run refused before, word for word.

        Any refused reply of the run, not only the one before: a correction that sends the
        first turn's refused call again after a refused prose answer repeats it too.
        """
        response = self.response
        if response is None or self.start.type is not TurnType.RETRY:
            return False
        reply = said(response.text, response.tool_calls)
        return any(
            turn.outcome is TurnOutcome.ERROR and said(turn.reply, turn.tool_calls) == reply
            for turn in self.earlier
        )


def ended_by(turn: Turn, message: str) -> Turn:
    """``turn``, cut short by a cancellation, as the run it ended records it.

    What ended the run from outside its turns (a mission timeout, a stop) is the turn's
    error, and the run failed after it.
    """
    return turn.model_copy(update={"error": message, "phase_after": Phase.FAILED.value})


def said(text: str, calls: Sequence[ToolCall]) -> str:
    """What a reply said, whitespace aside: its words, then its calls (names, arguments)."""
    words = " ".join(text.split())
    if not calls:
        return words
    listed = [[call.name, call.arguments] for call in calls]
    return f"{words}\n{json.dumps(listed, sort_keys=True, ensure_ascii=False, default=str)}"


def interrupted(
    in_flight: tuple[list[ToolCall], list[ToolRun | None]] | None,
    response: LLMResponse | None,
) -> tuple[list[ToolCall], list[ToolResult]]:
    """The calls of a turn cut short, and their results: those that came, then the rest.

    ``in_flight``: the calls of the tool turn under way and what had come back of them;
    without one, the reply's calls (if a reply came), none of which ran.
    """
    if in_flight is None:
        return (list(response.tool_calls) if response else []), []
    calls, runs = in_flight
    results = [
        run.result if run is not None else ToolResult(
            call_id=call.id, name=call.name, ok=False, content="", error_type="cancelled",
            completed=False,
        )
        for call, run in zip(calls, runs, strict=True)
    ]  # fmt: skip
    return list(calls), results
