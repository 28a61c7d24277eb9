"""The first stage of a turn: the request for the phase, and the draft of the turn.

Tools are offered in ``normal`` turns only (their schemas kept, with ``tool_choice="none"``,
where the agent asks to keep them for prompt caches); the system message is the one with
the tools listed when tools travel in the request or are offered. A paused turn that goes
on sends nothing: its draft is the first part's record, its calls the paused ones.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from subagent._hooks import ToolBatch
from subagent._live import LiveRun
from subagent._parts import AgentParts, RunOptions
from subagent._phases import Phase
from subagent._turns import TurnDraft
from subagent.llm import LLMRequest, ToolDefinition
from subagent.observe._observer import TurnStart
from subagent.records import Decision, PendingCalls, TurnType
from subagent.records._messages import trusted

__all__ = ["model_name", "prepared", "reentered"]

_TURN_TYPE = {Phase(kind.value): kind for kind in TurnType}
# Every field of a request the loop builds is set: one set for all of them (frozen models
# never change it).
_REQUEST_FIELDS = set(LLMRequest.model_fields)
_NO_TOOLS: list[ToolDefinition] = []  # shared by requests offering none; never changed


def prepared(live: LiveRun, parts: AgentParts, options: RunOptions) -> tuple[LLMRequest, TurnDraft]:
    """The request for the current phase, and the draft of the turn that sends it."""
    budget = live.budget
    phase = budget.phase
    offer = phase is Phase.NORMAL
    native = parts.protocol.native_tools
    keep = native and (offer or options.keep_tool_schemas)
    tools = parts.toolbox.definitions if keep else _NO_TOOLS
    messages = live.conversation.messages(
        live.systems.with_tools if offer or tools else live.systems.without_tools
    )
    index, turn_type = len(live.turns) + 1, _TURN_TYPE[phase]
    previous = live.turns[-1] if live.turns and not offer else None
    correction = options.correction
    corrected = correction is not None and correction.applies(
        phase, previous is not None and previous.repeated
    )
    output = options.correction_output if corrected else None
    # Built from values of the right types already: no validation (and no copies).
    request = trusted(LLMRequest, _REQUEST_FIELDS, {
        "messages": messages, "tools": tools,
        "tool_choice": "none" if tools and not offer else None,
        "settings": options.correction_settings if corrected else options.settings,
        "turn": parts.turn_info(index, turn_type), "output": output,
    })  # fmt: skip
    retry = phase is Phase.RETRY
    start = TurnStart(index, turn_type, budget.work_remaining, budget.retries_remaining,
                      budget.retry_attempt if retry else None,
                      budget.retry_total if retry else None, len(tools), len(messages),
                      live.conversation.collapsed)  # fmt: skip
    llm = options.correction_llm if corrected and options.correction_llm else options.llm
    draft = TurnDraft(start, phase, time.perf_counter(), llm=llm, model=model_name(llm),
                      corrected=corrected, output_mode=None if output is None else output.mode,
                      earlier=live.turns if phase is Phase.RETRY else ())  # fmt: skip
    return request, draft


def model_name(llm: object) -> str | None:
    """The name a model gives itself (its ``model_name``), if it gives one."""
    name = getattr(llm, "model_name", None)
    return name if isinstance(name, str) else None


def reentered(
    live: LiveRun,
    parts: AgentParts,
    pending: PendingCalls,
    decisions: Mapping[str, Decision] | None,
) -> tuple[TurnDraft, ToolBatch]:
    """The paused turn, going on: its draft (the first part's record) and its calls."""
    live.pending = None
    paused = live.turns.pop()  # the paused turn's record, completed by this part
    budget = live.budget
    offered = len(parts.toolbox.definitions) if parts.protocol.native_tools else 0
    start = TurnStart(paused.index, TurnType.NORMAL, budget.work_remaining,
                      budget.retries_remaining, None, None, offered, paused.messages_sent,
                      paused.messages_collapsed)  # fmt: skip
    decided = dict(decisions or {})
    draft = TurnDraft(start, Phase.NORMAL, time.perf_counter() - paused.duration_s,
                      pending.response, paused.transport_retries, decided,
                      model=paused.model)  # fmt: skip
    calls = list(pending.calls)
    batch = ToolBatch(calls, list(calls), parts.toolbox.call_limit, resumed=True,
                      decisions=decided)  # fmt: skip
    return draft, batch
