"""pydantic-ai: ``Agent`` on a ``FunctionModel``, tracing through ``agent.instrument``.

The fake answers in pydantic-ai's default output mode for a model ``output_type``: a call
to the output tool (``final_result``) whose arguments are the scripted JSON text, so an
invalid reply goes through pydantic-ai's own output-retry path. The correction budget is
``retries={"output": N}``; responses carry usage, so ``FunctionModel`` does not estimate
tokens (a cost a real model adapter would not have).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic_ai import Agent, InstrumentationSettings
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage
from scenarios import (
    INSTRUCTIONS,
    PROMPT,
    Answer,
    Outcome,
    RunFn,
    Scenario,
    Script,
    ToolCallSpec,
    add,
)

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

NAME = "pydantic-ai"
DISTRIBUTIONS = ("pydantic-ai-slim",)
NOTES = (
    "`FunctionModel` (async function); output via the default output tool; "
    '`retries={"output": 2}`; S3: `InstrumentationSettings(include_content=False)`'
)

USAGE = RequestUsage(input_tokens=20, output_tokens=5)


class _Fake:
    """The model function; reads the current run's script."""

    def __init__(self) -> None:
        self.script = Script(())

    async def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        reply = self.script.next(len(messages))
        if isinstance(reply, ToolCallSpec):
            part = ToolCallPart(reply.name, reply.arguments_json, tool_call_id=reply.call_id)
        else:
            output_tool = info.output_tools[0].name
            part = ToolCallPart(output_tool, reply, tool_call_id=f"out_{self.script.position}")
        return ModelResponse(parts=[part], usage=USAGE)


def build(scenario: Scenario, tracer_provider: TracerProvider | None) -> RunFn:
    fake = _Fake()
    agent = Agent(
        FunctionModel(fake, model_name="fake"),
        output_type=Answer,
        instructions=INSTRUCTIONS,
        tools=[add] if scenario.uses_tools else [],
        retries={"output": scenario.corrections},
        name=scenario.name.lower(),
    )
    if scenario.traced:
        agent.instrument = InstrumentationSettings(
            tracer_provider=tracer_provider, include_content=False
        )

    async def run() -> Outcome:
        fake.script = script = Script(scenario.script)
        result = await agent.run(PROMPT)
        return Outcome(result.output, script.sizes)

    return run
