"""This library: ``SubAgent`` on ``ScriptedLLM``, tracing through ``tracer_provider=``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scenarios import PROMPT, Answer, Outcome, RunFn, Scenario, Script, ToolCallSpec, add

from subagent import LLMRequest, LLMResponse, ScriptedLLM, SubAgent, Tool, ToolCall

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

NAME = "subagent"
DISTRIBUTIONS = ("subagent-runtime",)
NOTES = "`max_turns` = work turns, `return_retries` = corrections; spans via `tracer_provider=`"


def _reply(script: Script) -> Any:
    def reply(request: LLMRequest) -> str | LLMResponse:
        item = script.next(len(request.messages))
        if isinstance(item, ToolCallSpec):
            call = ToolCall(id=item.call_id, name=item.name, arguments=item.arguments)
            return LLMResponse(tool_calls=[call])
        return item

    return reply


def build(scenario: Scenario, tracer_provider: TracerProvider | None) -> RunFn:
    tools = [Tool(add)] if scenario.uses_tools else []
    agent = SubAgent(name=scenario.name.lower(), prompt=PROMPT, output=Answer, tools=tools)
    provider = tracer_provider if scenario.traced else None
    calls = scenario.model_calls

    async def run() -> Outcome:
        script = Script(scenario.script)
        llm = ScriptedLLM([_reply(script)] * calls)
        step = await agent.run(
            llm=llm,
            max_turns=scenario.work_turns,
            return_retries=scenario.corrections,
            tracer_provider=provider,
        )
        return Outcome(step.output if step.ok else step.failure, script.sizes)

    return run
