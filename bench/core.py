"""Core benchmark: S1 and S2 on ScriptedLLM, tracing off (issue #2).

S1: one invalid then one valid return, max_turns=1, return_retries=2.
S2: one tool call then a valid return, max_turns=2 (the tool runs inline).
S2 threaded: S2 with the tool in a worker thread, the default for sync tools.
Prints the median microseconds per run and per LLM call over repeated batches, after a
warm-up, in one process, plus peak RSS.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import anyio
from pydantic import BaseModel

from subagent import LLMResponse, ScriptedLLM, SubAgent, Tool, ToolCall


class Answer(BaseModel):
    value: int


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


S1_AGENT = SubAgent(name="s1", prompt="Compute {{question}}", output=Answer)
S2_AGENT = SubAgent(
    name="s2", prompt="Compute {{question}}", output=Answer, tools=[Tool(add, run_in_thread=False)]
)
S2_THREADED_AGENT = SubAgent(name="s2", prompt="Compute {{question}}", output=Answer, tools=[add])
S1_SCRIPT = ['{"value": "three"}', '{"value": 3}']
S2_SCRIPT = [LLMResponse(tool_calls=[ToolCall(name="add", arguments={"a": 1, "b": 2})]),
             '{"value": 3}']  # fmt: skip
CONTEXT = {"question": "1+2"}


def s1(**options: object) -> Callable[[], object]:
    async def run() -> object:
        llm = ScriptedLLM(S1_SCRIPT)
        step = await S1_AGENT.run(CONTEXT, llm=llm, max_turns=1, return_retries=2, **options)  # type: ignore[arg-type]
        assert step.ok and len(step.turns) == 2
        return step

    return run


def s2(*, threaded: bool = False, **options: object) -> Callable[[], object]:
    agent = S2_THREADED_AGENT if threaded else S2_AGENT

    async def run() -> object:
        llm = ScriptedLLM(S2_SCRIPT)
        step = await agent.run(CONTEXT, llm=llm, max_turns=2, **options)  # type: ignore[arg-type]
        assert step.ok and len(step.turns) == 2
        return step

    return run


async def measure(run: Callable[[], object], runs: int = 2000, batches: int = 7) -> float:
    """Median CPU microseconds per run over ``batches`` batches of ``runs`` runs.

    CPU time of this process (``time.process_time``), not wall-clock: the figure stays
    comparable when other processes share the machine.
    """
    for _ in range(300):  # warm-up
        await run()  # type: ignore[misc]
    medians = []
    for _ in range(batches):
        start = time.process_time()
        for _ in range(runs):
            await run()  # type: ignore[misc]
        medians.append((time.process_time() - start) / runs * 1e6)
    return statistics.median(medians)


async def thread_timings(
    agent: SubAgent[Any], script: list[Any], runs: int, **options: Any
) -> list[float]:
    """This thread's CPU µs (``time.thread_time``) of each of ``runs`` runs of ``agent``.

    Each run gets a fresh ``ScriptedLLM(script)`` and must succeed (a broken scenario would
    measure nothing useful).
    """
    timings = []
    for _ in range(runs):
        llm = ScriptedLLM(script)
        start = time.thread_time()
        step = await agent.run(CONTEXT, llm=llm, **options)
        timings.append((time.thread_time() - start) * 1e6)
        if not step.ok:
            raise RuntimeError(f"{agent.name} failed: {step.summary()}")
    return timings


async def alternating(
    variants: Mapping[str, Callable[[], Awaitable[list[float]]]], batches: int
) -> dict[str, float]:
    """The median of each variant's timings, its batches alternating with the others'.

    Each variant is a batch of runs returning one timing per run; every variant runs one
    batch as a warm-up, then ``batches`` rounds run one batch of each in turn, so that all
    see the same machine load.
    """
    for batch in variants.values():
        await batch()
    timings: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(batches):
        for name, batch in variants.items():
            timings[name] += await batch()
    return {name: statistics.median(values) for name, values in timings.items()}


def print_against_first(title: str, results: Mapping[str, Mapping[str, float]]) -> None:
    """Print ``title``, then per scenario each variant's µs and change from the first one's."""
    print(title)
    for name, figures in results.items():
        first = next(iter(figures.values()))
        line = "  ".join(
            f"{variant} {micros:6.1f} ({micros - first:+.1f}, {(micros / first - 1) * 100:+.1f}%)"
            for variant, micros in figures.items()
        )
        print(f"  {name}: {line}")


async def measure_against_first(
    what: str,
    scenarios: Iterable[str],
    measure: Callable[[str, int, int], Awaitable[dict[str, float]]],
    runs: int,
    batches: int,
) -> dict[str, dict[str, float]]:
    """``measure(scenario, runs, batches)`` of each scenario, printed against its first variant.

    For the alternating suites (tracing off, ScriptedLLM, asyncio, CPU µs per run).
    """
    results = {name: await measure(name, runs, batches) for name in scenarios}
    print_against_first(
        f"{what} (tracing off, ScriptedLLM, asyncio; CPU µs per run, median of "
        f"{runs * batches} runs per variant, variants alternating)",
        results,
    )
    return results


def runs_and_batches(doc: str | None) -> tuple[int, int]:
    """``--runs`` and ``--batches`` from the command line of an alternating suite."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=500, help="runs per batch")
    parser.add_argument("--batches", type=int, default=7, help="batches per variant")
    arguments = parser.parse_args()
    return arguments.runs, arguments.batches


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def main() -> dict[str, float]:
    results = {
        "S1": await measure(s1()),
        "S2": await measure(s2()),
        "S2 threaded": await measure(s2(threaded=True)),
    }
    print("core (tracing off, ScriptedLLM, asyncio; CPU time)")
    for name, micros in results.items():
        print(f"  {name:<11}: {micros:8.1f} us/run   {micros / 2:8.1f} us/LLM call")
    print(f"  peak RSS: {peak_rss_mib():.1f} MiB")
    return results


if __name__ == "__main__":
    anyio.run(main)
