"""Tracing demo: a traced run that calls a tool, survives a rate limit and corrects itself.

With an OTLP receiver (Jaeger, see docs/tracing.md)::

    docker compose -f tracing/compose.yaml up -d
    set -a; . tracing/jaeger.env; set +a
    python examples/tracing_demo.py        # then open http://localhost:16686

Without ``OTEL_EXPORTER_OTLP_ENDPOINT`` it prints one line per turn on stderr instead.
The model is scripted, so the demo needs no API key and always tells the same story:

1. turn 1 (``normal``): the first call is rate-limited and retried (a span event), then the
   model calls the ``add`` tool;
2. turn 2 (``must_return``): the model answers ``{"value": "three"}``: invalid, fed back;
3. turn 3 (``retry``): the model answers ``{"value": 3}``: done.
"""

from __future__ import annotations

from pydantic import BaseModel

from subagent import (
    ErrorKind,
    LLMError,
    LLMResponse,
    RetryPolicy,
    ScriptedLLM,
    Step,
    SubAgent,
    ToolCall,
    Usage,
    tracing,
)


class Answer(BaseModel):
    value: int


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def build() -> tuple[SubAgent[Answer], ScriptedLLM]:
    """The agent and the model's script."""
    agent = SubAgent(
        name="calc",
        prompt="Compute {{question}} with the tools you have.",
        output=Answer,
        tools=[add],
        max_turns=2,
        return_retries=1,
        retry_policy=RetryPolicy(max_attempts=2, initial_delay=0.05, jitter=0.0),
    )
    llm = ScriptedLLM(
        [
            LLMError(ErrorKind.RATE_LIMIT, "too many requests", status_code=429),
            LLMResponse(
                tool_calls=[ToolCall(name="add", arguments={"a": 1, "b": 2}, id="call-add")],
                usage=Usage(input_tokens=182, output_tokens=21),
                model="scripted-demo",
            ),
            LLMResponse(
                text='{"value": "three"}',
                usage=Usage(input_tokens=240, output_tokens=9),
                model="scripted-demo",
            ),
            LLMResponse(
                text='{"value": 3}',
                usage=Usage(input_tokens=301, output_tokens=8),
                model="scripted-demo",
            ),
        ],
        model_name="scripted-demo",
    )
    return agent, llm


def main() -> Step[Answer]:
    """Configure tracing from the OTEL_* variables and run the agent once."""
    handle = tracing.configure(service_name="subagent-demo")  # flushed at exit
    agent, llm = build()
    step = agent.run_sync({"question": "1 + 2"}, llm=llm)
    target = f"{handle.protocol} {handle.endpoint}" if handle.endpoint else "the console"
    print(f"{step.summary()}; spans sent to {target}")
    return step


if __name__ == "__main__":
    main()
