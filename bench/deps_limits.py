"""What per-run deps and usage limits cost a run: S1 and S2 with and without them.

S1 and S2 of ``core.py`` (ScriptedLLM, tracing off, the tool inline), each run:

- plain: no deps, no limits (the path that skips the checks);
- ``deps``: ``run(deps=...)``; in S2 the tool takes ``ctx: RunContext`` and reads them;
- ``limits``: ``run(usage_limits=...)`` with token and tool-call limits (never reached):
  checked before each call, after each reply and before tool calls;
- ``limits + cost``: the same with ``max_cost`` and one ``Price`` (the cost computed too).

Variants alternate batch by batch in one process after a warm-up; figures are medians of
this thread's CPU time per run (``time.thread_time``). Run: ``python bench/deps_limits.py
[--runs N] [--batches B]``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import anyio
from core import CONTEXT, S1_AGENT, S1_SCRIPT, S2_AGENT, S2_SCRIPT, Answer

from subagent import Price, RunContext, ScriptedLLM, SubAgent, Tool, UsageLimits


def add(ctx: RunContext[dict[str, int]], a: int, b: int) -> int:
    """Add two integers."""
    return a + b + ctx.deps["offset"]


S2_DEPS = SubAgent(name="s2", prompt="Compute {{question}}", output=Answer,
                   tools=[Tool(add, run_in_thread=False)])  # fmt: skip
LIMITS = UsageLimits(max_input_tokens=10**6, max_output_tokens=10**6, max_total_tokens=10**6,
                     max_tool_calls=100)  # fmt: skip
COSTED = UsageLimits(max_total_tokens=10**6, max_tool_calls=100, max_cost=100.0,
                     prices=Price(2.5, 10.0))  # fmt: skip
DEPS = {"offset": 0}
SCENARIOS: dict[str, tuple[dict[str, Any], dict[str, dict[str, Any]]]] = {
    "S1": ({"max_turns": 1, "return_retries": 2}, {
        "plain": {}, "deps": {"deps": DEPS}, "limits": {"usage_limits": LIMITS},
        "limits + cost": {"usage_limits": COSTED},
    }),
    "S2": ({"max_turns": 2}, {
        "plain": {}, "deps": {"deps": DEPS}, "limits": {"usage_limits": LIMITS},
        "limits + cost": {"usage_limits": COSTED},
    }),
}  # fmt: skip


def _agent(scenario: str, variant: str) -> SubAgent[Any]:
    if scenario == "S1":
        return S1_AGENT
    return S2_DEPS if variant == "deps" else S2_AGENT


async def _batch(scenario: str, variant: str, runs: int) -> list[float]:
    options, variants = SCENARIOS[scenario]
    agent, script = _agent(scenario, variant), S1_SCRIPT if scenario == "S1" else S2_SCRIPT
    timings = []
    for _ in range(runs):
        llm = ScriptedLLM(script)
        start = time.thread_time()
        step = await agent.run(CONTEXT, llm=llm, **options, **variants[variant])
        timings.append((time.thread_time() - start) * 1e6)
        if not step.ok:  # pragma: no cover - a broken scenario would measure nothing useful
            raise RuntimeError(f"{scenario} {variant} failed: {step.summary()}")
    return timings


async def measure(scenario: str, runs: int, batches: int) -> dict[str, float]:
    """Median µs per run of each variant, batches alternating."""
    variants = SCENARIOS[scenario][1]
    for variant in variants:  # warm-up
        await _batch(scenario, variant, runs)
    timings: dict[str, list[float]] = {variant: [] for variant in variants}
    for _ in range(batches):
        for variant in variants:
            timings[variant] += await _batch(scenario, variant, runs)
    return {variant: statistics.median(values) for variant, values in timings.items()}


async def main(runs: int = 500, batches: int = 7) -> dict[str, dict[str, float]]:
    results = {name: await measure(name, runs, batches) for name in SCENARIOS}
    print(f"deps and usage limits (tracing off, ScriptedLLM, asyncio; CPU µs per run, median "
          f"of {runs * batches} runs per variant, variants alternating)")  # fmt: skip
    for name, figures in results.items():
        plain = figures["plain"]
        line = "  ".join(
            f"{variant} {micros:6.1f} ({micros - plain:+.1f})"
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
