"""OpenAI Agents SDK: ``Agent`` + ``Runner.run`` on a ``Model`` subclass.

The SDK has no output-retry budget: with ``output_type=Answer`` an invalid final output
raises ``ModelBehaviorError`` (its ``invalid_final_output`` error handler can substitute an
output, not ask again), and by default that error is redacted: it carries neither the reply
nor the history. So every scenario uses the pattern the SDK's maintainers recommend: a text
output validated by the caller (``Answer.model_validate_json``), and on failure the agent
runs again on ``result.to_input_list()`` plus a feedback message, up to the correction
budget. Work turns are ``max_turns``.

Tracing is off (``RunConfig(tracing_disabled=True)``) except in S3, where the SDK's spans
reach OpenTelemetry through OpenInference's tracing processor (the SDK has no OpenTelemetry
export of its own), told to hide inputs and outputs (message content).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from agents import (
    Agent,
    Model,
    ModelResponse,
    ModelSettings,
    ModelTracing,
    RunConfig,
    Runner,
    Usage,
    function_tool,
    generation_span,
)
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)
from pydantic import ValidationError
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

NAME = "openai-agents"
DISTRIBUTIONS = ("openai-agents", "openai", "openinference-instrumentation-openai-agents")
NOTES = (
    "`Model` subclass; no output retries: the caller validates and re-runs on "
    "`result.to_input_list()` + feedback. Tracing off in S1/S2/S4 (`tracing_disabled`; the "
    "SDK's default is on, exporting to OpenAI); S3 through OpenInference's tracing processor, "
    "which replaces the default one, inputs and outputs hidden"
)

_instrumentor: Any = None


class FakeModel(Model):
    """Answers from the current run's script, with a generation span like the real adapters."""

    def __init__(self) -> None:
        self.script = Script(())

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[Any],
        model_settings: ModelSettings,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
    ) -> ModelResponse:
        size = 1 if isinstance(input, str) else len(input)
        with generation_span(model="fake", disabled=tracing.is_disabled()) as span:
            reply = self.script.next(size)
            item: ResponseFunctionToolCall | ResponseOutputMessage
            if isinstance(reply, ToolCallSpec):
                item = ResponseFunctionToolCall(
                    type="function_call",
                    call_id=reply.call_id,
                    name=reply.name,
                    arguments=reply.arguments_json,
                )
            else:
                text = ResponseOutputText(type="output_text", text=reply, annotations=[])
                item = ResponseOutputMessage(
                    id=f"msg_{self.script.position}",
                    type="message",
                    role="assistant",
                    status="completed",
                    content=[text],
                )
            usage = Usage(requests=1, input_tokens=20, output_tokens=5, total_tokens=25)
            span.span_data.usage = {"input_tokens": 20, "output_tokens": 5}
        return ModelResponse(output=[item], usage=usage, response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the scenarios do not stream")


def _instrument(tracer_provider: TracerProvider | None) -> None:
    global _instrumentor
    if _instrumentor is None:
        from openinference.instrumentation import TraceConfig
        from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

        _instrumentor = OpenAIAgentsInstrumentor()
        _instrumentor.instrument(
            tracer_provider=tracer_provider,
            config=TraceConfig(hide_inputs=True, hide_outputs=True),
        )


def release() -> None:
    """Take the OpenTelemetry processor out again (it wraps tool execution globally)."""
    global _instrumentor
    if _instrumentor is not None:
        _instrumentor.uninstrument()
        _instrumentor = None


def build(scenario: Scenario, tracer_provider: TracerProvider | None) -> RunFn:
    model = FakeModel()
    agent = Agent(
        name=scenario.name.lower(),
        instructions=INSTRUCTIONS,
        model=model,
        tools=[function_tool(add)] if scenario.uses_tools else [],
    )
    config = RunConfig(
        tracing_disabled=not scenario.traced,
        workflow_name=scenario.name,
    )
    if scenario.traced:
        _instrument(tracer_provider)

    async def run() -> Outcome:
        model.script = script = Script(scenario.script)
        task: str | list[Any] = PROMPT
        for attempt in range(scenario.corrections + 1):
            result = await Runner.run(agent, task, max_turns=scenario.work_turns, run_config=config)
            try:
                return Outcome(Answer.model_validate_json(result.final_output), script.sizes)
            except ValidationError as error:
                if attempt == scenario.corrections:
                    raise
                feedback = f"Invalid answer: {error}. Reply again with JSON only."
                task = [*result.to_input_list(), {"role": "user", "content": feedback}]
        raise AssertionError("unreachable")

    return run
