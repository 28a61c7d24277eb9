"""What metrics cost a run: S1 and S2 before metrics existed, as shipped, and with an SDK.

S1: one invalid then one valid return, ``max_turns=1, return_retries=2`` (2 LLM calls).
S2: one tool call (inline) then a valid return, ``max_turns=2`` (2 calls, 1 tool call).

Variants, in one process, alternating batch by batch after a warm-up, tracing off:

- "before": the turn loop with the observer choice of the code before metrics (no metrics
  observer at all), patched in for the batch;
- "no SDK": as shipped, no meter provider configured (the API's proxy: the run gets no
  metrics observer);
- "SDK on": a global SDK ``MeterProvider`` with an ``InMemoryMetricReader`` (every
  instrument recorded: 7 data points per run, aggregated in memory).

Figures are medians of this thread's CPU time per run (``time.thread_time``), comparable
on a shared machine. Run: ``.venv/bin/python bench/metrics.py [--runs N] [--batches B]``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import opentelemetry.metrics._internal as metrics_state
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.util._once import Once
from pydantic import BaseModel

import subagent._run as run_module
from subagent import LLMResponse, ScriptedLLM, SubAgent, Tool, ToolCall
from subagent.observe import (
    EventObserver,
    StreamObserver,
    TextObserver,
    combine,
    span_observer,
)


class Answer(BaseModel):
    value: int


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


S1 = SubAgent(name="s1", prompt="Compute {{question}}", output=Answer)
S2 = SubAgent(name="s2", prompt="Compute {{question}}", output=Answer,
              tools=[Tool(add, run_in_thread=False)])  # fmt: skip
SCENARIOS: dict[str, tuple[SubAgent[Any], Callable[[], list[Any]], dict[str, int]]] = {
    "S1": (S1, lambda: ['{"value": "three"}', '{"value": 3}'],
           {"max_turns": 1, "return_retries": 2}),
    "S2": (S2, lambda: [LLMResponse(tool_calls=[ToolCall(name="add", arguments={"a": 1, "b": 2})]),
                        '{"value": 3}'], {"max_turns": 2}),
}  # fmt: skip
CONTEXT = {"question": "1+2"}


def _observer_before_metrics(
    agent: str,
    llm: object,
    tracer_provider: Any,
    on_event: Any,
    on_text: Any,
    events: Any = None,
    tool_names: Any = (),
) -> Any:
    """``observer_for_run`` as it was before metrics: spans, callbacks, the event stream."""
    return combine(
        [
            EventObserver(agent, on_event) if on_event is not None else None,
            span_observer(agent, tracer_provider, llm, tool_names),
            TextObserver(on_text) if on_text is not None else None,
            StreamObserver(agent, events) if events is not None else None,
        ]
    )  # fmt: skip


@contextmanager
def before_metrics() -> Iterator[None]:
    saved = run_module.observer_for_run
    run_module.observer_for_run = _observer_before_metrics
    try:
        yield
    finally:
        run_module.observer_for_run = saved


@contextmanager
def no_sdk() -> Iterator[None]:
    yield


@contextmanager
def sdk_on(provider: MeterProvider) -> Iterator[None]:
    """``provider`` as the global meter provider for the block (unset again after it)."""
    saved = (metrics_state._METER_PROVIDER, metrics_state._METER_PROVIDER_SET_ONCE)
    metrics_state._METER_PROVIDER_SET_ONCE = Once()
    metrics.set_meter_provider(provider)
    try:
        yield
    finally:
        metrics_state._METER_PROVIDER, metrics_state._METER_PROVIDER_SET_ONCE = saved


async def _batch(scenario: str, runs: int) -> list[float]:
    agent, script, options = SCENARIOS[scenario]
    timings = []
    for _ in range(runs):
        llm = ScriptedLLM(script())
        start = time.thread_time()
        step = await agent.run(CONTEXT, llm=llm, **options)  # type: ignore[arg-type]
        timings.append((time.thread_time() - start) * 1e6)
        if not step.ok:  # pragma: no cover - a broken scenario would measure nothing useful
            raise RuntimeError(f"{scenario} failed: {step.summary()}")
    return timings


async def measure(scenario: str, runs: int, batches: int) -> dict[str, float]:
    """Median µs per run of each variant, batches alternating."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    variants: dict[str, Callable[[], Any]] = {
        "before": before_metrics, "no SDK": no_sdk, "SDK on": lambda: sdk_on(provider),
    }  # fmt: skip
    for make in variants.values():  # warm-up
        with make():
            await _batch(scenario, runs)
    timings: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(batches):
        for name, make in variants.items():
            with make():
                timings[name] += await _batch(scenario, runs)
    provider.shutdown()
    return {name: statistics.median(values) for name, values in timings.items()}


async def main(runs: int = 500, batches: int = 7) -> dict[str, dict[str, float]]:
    results = {name: await measure(name, runs, batches) for name in SCENARIOS}
    print(f"metrics (tracing off, ScriptedLLM, asyncio; CPU µs per run, median of "
          f"{runs * batches} runs per variant, variants alternating)")  # fmt: skip
    for name, figures in results.items():
        before = figures["before"]
        line = "  ".join(
            f"{variant} {micros:7.1f} ({(micros / before - 1) * 100:+.1f}%)"
            for variant, micros in figures.items()
        )
        print(f"  {name}: {line}")
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--batches", type=int, default=7)
    arguments = parser.parse_args()
    anyio.run(main, arguments.runs, arguments.batches)
