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

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import opentelemetry.metrics._internal as metrics_state
from core import (
    S1_AGENT,
    S1_SCRIPT,
    S2_AGENT,
    S2_SCRIPT,
    alternating,
    measure_against_first,
    runs_and_batches,
    thread_timings,
)
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.util._once import Once

import subagent._run as run_module
from subagent import SubAgent
from subagent.observe._events import EventObserver
from subagent.observe._observer import TextObserver, combine
from subagent.observe._otel import span_observer
from subagent.observe._stream import StreamObserver

SCENARIOS: dict[str, tuple[SubAgent[Any], list[Any], dict[str, int]]] = {
    "S1": (S1_AGENT, S1_SCRIPT, {"max_turns": 1, "return_retries": 2}),
    "S2": (S2_AGENT, S2_SCRIPT, {"max_turns": 2}),
}


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


async def measure(scenario: str, runs: int, batches: int) -> dict[str, float]:
    """Median µs per run of each variant, batches alternating."""
    agent, script, options = SCENARIOS[scenario]
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    variants: dict[str, Callable[[], Any]] = {
        "before": before_metrics, "no SDK": no_sdk, "SDK on": lambda: sdk_on(provider),
    }  # fmt: skip

    def batch(make: Callable[[], Any]) -> Callable[[], Awaitable[list[float]]]:
        async def timed() -> list[float]:
            with make():
                return await thread_timings(agent, script, runs, **options)

        return timed

    try:
        return await alternating({name: batch(make) for name, make in variants.items()}, batches)
    finally:
        provider.shutdown()


async def main(runs: int = 500, batches: int = 7) -> dict[str, dict[str, float]]:
    return await measure_against_first("metrics", SCENARIOS, measure, runs, batches)


if __name__ == "__main__":
    anyio.run(main, *runs_and_batches(__doc__))
