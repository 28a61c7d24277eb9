"""The judge stage of a turn: what a reply comes to.

A reply is read by the agent's protocol (native tool calls, or ReAct text): it calls tools
(a :class:`ToolBatch` for the tool stage, or refused outside ``normal``), is cut off, is
unreadable, fails explicitly, or is an answer the output contract and the validators judge.
"""

from __future__ import annotations

from collections.abc import Sequence

from subagent._errors import ErrorKind
from subagent._hooks import ToolBatch
from subagent._host import RunHost
from subagent._phases import Phase, Trigger
from subagent._verdicts import Answered, Ended, GaveUp, Missed, Verdict
from subagent.llm import LLMResponse, StopReason, ToolCall
from subagent.parsers import ParseResult
from subagent.parsers._contract import detect_explicit_fail, fail_beside_other_json
from subagent.parsers._validation import run_validators

__all__ = ["judge_answer", "judge_reply"]

_NONE_OFFERED: frozenset[str] = frozenset()
_FILTERED = "the provider's content filter blocked the reply"


async def judge_reply(host: RunHost, response: LLMResponse, index: int) -> Verdict | ToolBatch:
    """The verdict on ``response`` (turn ``index``), or the tool calls it asks to run."""
    if response.stop_reason is StopReason.CONTENT_FILTER:
        return Ended(Trigger.LLM_FAILED, _FILTERED, "content_filter", ErrorKind.CONTENT_FILTER)
    parts = host.parts
    in_normal = host.live.budget.phase is Phase.NORMAL
    offered = parts.toolbox.tools if in_normal else _NONE_OFFERED
    reading = parts.protocol.read(response, offered, parts.templates)
    if reading.calls:
        calls = _with_ids(reading.calls, index)
        if in_normal:
            return ToolBatch(calls, list(calls), limit=parts.toolbox.call_limit)
        error, results = parts.toolbox.refuse(calls)
        return Missed(error, "tools_unavailable", results=results, calls=calls)
    if response.stop_reason is StopReason.LENGTH and parts.correct_cut_replies:
        return Missed(parts.templates.render("truncated_reply"), "truncated")
    if reading.problem is not None:
        return Missed(reading.problem, "invalid_action")
    return await judge_answer(host, reading.answer or "")


async def judge_answer(host: RunHost, text: str) -> Verdict:
    """A return attempt: an explicit fail, or an answer the output contract judges."""
    parts = host.parts
    limit = parts.contract.max_reply_chars
    reason = detect_explicit_fail(text, max_chars=limit)
    if reason is not None:
        return GaveUp(reason)
    if fail_beside_other_json(text, max_chars=limit):  # neither an answer nor giving up
        return Missed(parts.templates.render("fail_beside_answer"), "invalid_output",
                      summary="a fail object beside other JSON")  # fmt: skip
    parsed: ParseResult = parts.contract.parse(text, parts.templates)
    if not parsed.ok:
        return Missed(parsed.feedback, "invalid_output", summary=parsed.summary or None)
    value = parsed.value
    if not parts.validators:
        return Answered(value)
    context = host.run_context() if parts.validators_take_context else None
    token = host.enter_user_code()
    try:
        validation = await run_validators(parts.validators, value, context)
    finally:
        host.leave_user_code(token)
    if validation.valid:
        return Answered(value)
    error = parts.templates.render("validation_failed", errors=list(validation.errors))
    count = len(validation.errors)
    return Missed(error, "validation_failed", summary=f"{count} validation error(s)")


def _with_ids(calls: Sequence[ToolCall], index: int) -> list[ToolCall]:
    """The calls, each with an id of its own in the reply.

    A call the model gave no id gets ``call_<turn>_<position>``; one that repeats an
    earlier call's id (models do) gets its id with ``_<position>`` after it. Everything
    after reads these ids (results, decisions, a paused state), so a pause can always be
    answered call by call.
    """
    if len(calls) == 1 and calls[0].id:
        return list(calls)  # the commonest case: one call, with its id
    ids = [call.id for call in calls]
    if all(ids) and len(set(ids)) == len(ids):
        return list(calls)  # the common case: no call copied
    taken = set(ids)
    seen: set[str] = set()
    unique: list[ToolCall] = []
    for position, call in enumerate(calls, start=1):
        if call.id and call.id not in seen:
            seen.add(call.id)
            unique.append(call)
            continue
        new = f"{call.id}_{position}" if call.id else f"call_{index}_{position}"
        while new in taken or new in seen:
            new = f"{new}_"
        seen.add(new)
        unique.append(call.model_copy(update={"id": new}))
    return unique
