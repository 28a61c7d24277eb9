"""Metrics demo: three scripted runs of one agent, and the metrics they leave behind.

A run records OpenTelemetry metrics to the global meter provider once the application has
set one up. In production ``subagent.tracing.configure()`` does it and exports them over
OTLP (``OTEL_EXPORTER_OTLP_ENDPOINT``); here an SDK ``MeterProvider`` with an in-memory
reader stands in for the receiver, and the demo prints what a dashboard would get:

1. a run that calls the ``add`` tool, then answers;
2. a run whose first answer is invalid and is corrected (one correction turn);
3. a run that never answers validly (``failed``, ``budget_exhausted``).

The model is scripted, so the demo needs no API key and always tells the same story.
"""

from __future__ import annotations

import anyio
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    InMemoryMetricReader,
    NumberDataPoint,
)
from pydantic import BaseModel

from subagent import LLMResponse, ScriptedLLM, SubAgent, ToolCall, Usage


class Answer(BaseModel):
    value: int


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


AGENT = SubAgent(name="calc", prompt="Compute {{question}}", output=Answer, tools=[add],
                 max_turns=2, return_retries=1)  # fmt: skip
TOOL_CALL = LLMResponse(tool_calls=[ToolCall(name="add", arguments={"a": 1, "b": 2})],
                        usage=Usage(input_tokens=120, output_tokens=20))  # fmt: skip
SCRIPTS = (
    [TOOL_CALL, LLMResponse(text='{"value": 3}', usage=Usage(input_tokens=160, output_tokens=6))],
    ["I think it is three", '{"value": "three"}', '{"value": 3}'],
    ["no idea", "none", "still none"],
)
SHOWN = {  # the attribute that tells a metric's data points apart
    "gen_ai.client.token.usage": "gen_ai.token.type",
    "gen_ai.execute_tool.duration": "gen_ai.tool.name",
    "subagent.corrections": "subagent.turn.outcome",
}


def describe(reader: InMemoryMetricReader) -> list[str]:
    """One line per data point: metric, unit, its distinguishing attributes, its value."""
    data = reader.get_metrics_data()
    assert data is not None
    lines = []
    for metric in data.resource_metrics[0].scope_metrics[0].metrics:
        for point in metric.data.data_points:
            attributes = dict(point.attributes or {})
            if metric.name in SHOWN:
                label = str(attributes[SHOWN[metric.name]])
            elif metric.name == "subagent.turns":
                label = f"{attributes['subagent.turn.type']} {attributes['subagent.turn.outcome']}"
            elif metric.name == "subagent.runs":
                label = " ".join(
                    str(attributes[key])
                    for key in ("subagent.outcome", "subagent.failure.reason")
                    if key in attributes
                )
            else:
                label = str(attributes.get("error.type", ""))
            if isinstance(point, HistogramDataPoint):
                value = f"count={point.count}"
                if metric.unit == "{token}":
                    value += f" sum={point.sum}"
            elif isinstance(point, NumberDataPoint):
                value = f"{point.value}"
            else:  # no exponential histograms here
                continue
            lines.append(f"{metric.name:<34} {metric.unit:<8} {label:<26} {value}")
    return lines


async def main() -> list[str]:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    metrics.set_meter_provider(provider)  # configure() does this (with an OTLP exporter)
    for script in SCRIPTS:
        await AGENT.run({"question": "1+2"}, llm=ScriptedLLM(script))
    lines = describe(reader)
    provider.shutdown()
    return lines


if __name__ == "__main__":
    for line in anyio.run(main):
        print(line)
