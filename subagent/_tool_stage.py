"""The tool stage of a turn: the calls a reply asked for, run (or paused, or refused).

The run's hooks see the batch first (approval may pause the run or apply its decisions;
usage limits may end it), then the calls run, concurrently unless the agent says not to,
their results in call order. A resumed turn comes through here too, its decisions on the
batch. What the calls came to is a verdict: the run's answer (a tool's valid final value),
a tool turn to keep in the context (its failures fed back), or the end of the run (a tool
server lost, a limit).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio

from subagent._hooks import Pause, ToolBatch
from subagent._host import RunHost
from subagent._judge import judge_answer
from subagent._phases import Trigger
from subagent._verdicts import Answered, Ended, Paused, ToolsRan, Verdict
from subagent.llm import LLMResponse, ToolCall
from subagent.tools._execute import ToolRun
from subagent.tools._tool import render_result

__all__ = ["run_batch"]


async def run_batch(host: RunHost, response: LLMResponse, batch: ToolBatch) -> Verdict:
    """Run ``batch`` (the calls of ``response``) and judge what came of them."""
    calls = batch.calls
    for hook in host.hooks.before_tools:
        answer = hook(batch, host.run_context)
        if isinstance(answer, Pause):
            return Paused(calls, answer.waiting)
        if answer is not None:
            return Ended(Trigger.LIMIT_REACHED, answer, "usage_limit", calls=calls)
    runs = await _run_calls(host, batch)
    done = [run for run in runs if run is not None]
    results = [run.result for run in done]
    for position, note in batch.notes.items():  # an approver's edit, told with the result
        result = results[position]
        results[position] = result.model_copy(update={"content": f"{note}\n\n{result.content}"})
    for run in done:
        if run.extras:
            host.live.extras = {**(host.live.extras or {}), **run.extras}
    if host.hooks.after_tools:
        host.in_flight = (batch.calls, runs)  # a hook that raises keeps the turn's results
        for hook in host.hooks.after_tools:
            hook(batch, results, host.run_context)
        host.in_flight = None
    lost = next((run for run in done if run.lost is not None), None)
    if lost is not None:  # the results stay on the turn; the run ends with them
        return Ended(Trigger.SERVER_LOST, lost.lost or "", "tool_server_lost", calls=calls,
                     results=results, summary=lost.result.name)  # fmt: skip
    parts = host.parts
    # The exchange shows the calls as they ran (an approver's edit included).
    exchange = parts.protocol.tool_exchange(response, batch.running, results, parts.templates)
    final = next((run for run in done if run.final), None)
    if final is not None:
        return await _final(host, final, calls, results, exchange)
    ran = min(len(calls), batch.limit)
    failed = [result for result in results[:ran] if not result.ok]
    refused = len(calls) - ran
    if failed or refused:
        lines = [f"{result.name}: {result.error_type}" for result in failed]
        if refused:
            lines.append(f"{refused} call(s) past the limit of {ran} per reply: too_many_calls")
        return ToolsRan(calls, results, exchange, "\n".join(lines), "tool_error")
    return ToolsRan(calls, results, exchange)


async def _run_calls(host: RunHost, batch: ToolBatch) -> list[ToolRun | None]:
    """Run the batch's calls within its limit; the others' results in their places."""
    toolbox = host.parts.toolbox
    running = batch.running
    runs: list[ToolRun | None] = [None] * len(running)
    within = running[: batch.limit]
    # The calls past the per-reply limit are refused, never run.
    runs[len(within) :] = [ToolRun(result) for result in toolbox.over_limit(running)]
    to_run = list(enumerate(within))
    if batch.preset:
        for position, result in batch.preset.items():
            if position < len(within):
                runs[position] = ToolRun(result)
        to_run = [(position, call) for position, call in to_run if position not in batch.preset]
    live = host.live
    host.in_flight = (batch.calls, runs)
    extras, live.extras = live.extras, None  # handed to this turn's calls, then cleared
    context = host.run_context() if toolbox.wants_context else None
    token = host.enter_user_code()
    try:
        if len(to_run) == 1 or not host.parts.parallel_tool_calls:
            for position, call in to_run:
                runs[position] = await _run_tool(host, call, extras, context)
        else:

            async def run_one(position: int, call: ToolCall) -> None:
                runs[position] = await _run_tool(host, call, extras, context)

            async with anyio.create_task_group() as group:
                for position, call in to_run:
                    group.start_soon(run_one, position, call)
    finally:
        host.leave_user_code(token)
    host.in_flight = None
    return runs


async def _run_tool(
    host: RunHost, call: ToolCall, extras: Mapping[str, Any] | None, context: Any
) -> ToolRun:
    with host.observer.tool(call) as observed:
        last = host.live.budget.last_work_turn_next  # tools run in normal turns only
        run = await host.parts.toolbox.run(call, extras, context, last_tool_turn=last)
        observed.returned(run.result)
    return run


async def _final(
    host: RunHost, final: ToolRun, calls: list[ToolCall], results: list[Any], exchange: list[Any]
) -> Verdict:
    """A tool's final value, judged by the output contract like any return."""
    value = final.value
    answer = await judge_answer(host, value if isinstance(value, str) else render_result(value))
    if isinstance(answer, Answered):
        return Answered(answer.output, calls, results)
    error = answer.error or ""
    return ToolsRan(calls, results, exchange, error, answer.error_type, answer.summary,
                    final_invalid=(final.result.name, error))  # fmt: skip
