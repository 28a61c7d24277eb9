"""The last stage of a turn: its verdict applied to the run's live state.

The verdict's trigger moves the state table; then the run keeps what the next turn needs:
the calls waiting for approval, the output, the failure (its reason is the table row's),
a tool exchange (with the notices the next phase calls for), or a failed attempt and the
feedback about it (collapsed or kept, by the run's context policy).
"""

from __future__ import annotations

from subagent._conversation import with_notice
from subagent._errors import ErrorKind
from subagent._feedback import after_tools, feedback
from subagent._live import LiveRun
from subagent._parts import AgentParts, RunOptions
from subagent._phases import Phase, advance
from subagent._verdicts import Answered, Ended, Missed, Paused, ToolsRan, Verdict
from subagent.llm import LLMResponse
from subagent.records import Failure, PendingCalls
from subagent.records._messages import user_message

__all__ = ["apply", "failure"]


def apply(
    live: LiveRun,
    parts: AgentParts,
    options: RunOptions,
    verdict: Verdict,
    response: LLMResponse | None,
) -> str | None:
    """Fire the verdict's trigger; keep what the next turn needs. Returns the feedback."""
    next_phase = advance(live.budget, verdict.trigger)
    match verdict:
        case Paused():
            assert response is not None
            live.pending = PendingCalls(response=response, calls=verdict.calls,
                                        needs_approval=verdict.waiting)  # fmt: skip
        case Answered():
            live.output = verdict.output
            if response is not None:
                live.final_reply = parts.protocol.failed_reply(response)
        case ToolsRan() if next_phase is not Phase.FAILED:
            return _keep_exchange(live, parts, verdict, next_phase)
        case Missed() if next_phase is not Phase.FAILED:
            assert response is not None
            return _feed_back(live, parts, verdict, response, next_phase)
        case _:
            kind = verdict.error_kind if isinstance(verdict, Ended) else None
            live.failure = failure(live, _failure_message(options, verdict), kind)
            if response is not None:  # the reply that ended the run, failed or not
                live.final_reply = parts.protocol.failed_reply(response)
    return None


def failure(live: LiveRun, message: str, error_kind: ErrorKind | None) -> Failure:
    """The run's failure; its reason is the one the table's row recorded."""
    reason = live.budget.failure_reason
    assert reason is not None
    return Failure(reason=reason, message=message, error_kind=error_kind)


def _keep_exchange(
    live: LiveRun, parts: AgentParts, verdict: ToolsRan, next_phase: Phase
) -> str | None:
    notice = after_tools(parts.templates, verdict.final_invalid, next_phase, live.budget,
                         bool(parts.toolbox))  # fmt: skip
    exchange = verdict.exchange
    if notice is not None:
        exchange = with_notice(exchange, parts.notice(notice))
    live.conversation.add_exchange(exchange)
    return notice


def _feed_back(
    live: LiveRun, parts: AgentParts, verdict: Missed, response: LLMResponse, next_phase: Phase
) -> str:
    text = feedback(parts.templates, verdict.error, next_phase, live.budget, bool(parts.toolbox))
    reply = parts.protocol.failed_reply(response)
    live.conversation.add_failed_attempt(reply, user_message(text))
    return text


def _failure_message(options: RunOptions, verdict: Verdict) -> str:
    if isinstance(verdict, Missed):
        return (
            f"no valid answer within max_turns={options.max_turns} and "
            f"return_retries={options.return_retries}; last error: {verdict.error}"
        )
    return verdict.error or verdict.outcome.value
