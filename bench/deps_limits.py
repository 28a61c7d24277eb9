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

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from core import (
    S1_AGENT,
    S1_SCRIPT,
    S2_AGENT,
    S2_SCRIPT,
    Answer,
    alternating,
    measure_against_first,
    runs_and_batches,
    thread_timings,
)

from subagent import Price, RunContext, SubAgent, Tool, UsageLimits


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


def _batch(scenario: str, variant: str, runs: int) -> Callable[[], Awaitable[list[float]]]:
    options, variants = SCENARIOS[scenario]
    script = S1_SCRIPT if scenario == "S1" else S2_SCRIPT
    agent = _agent(scenario, variant)
    return lambda: thread_timings(agent, script, runs, **options, **variants[variant])


async def measure(scenario: str, runs: int, batches: int) -> dict[str, float]:
    """Median µs per run of each variant, batches alternating."""
    variants = {variant: _batch(scenario, variant, runs) for variant in SCENARIOS[scenario][1]}
    return await alternating(variants, batches)


async def main(runs: int = 500, batches: int = 7) -> dict[str, dict[str, float]]:
    return await measure_against_first("deps and usage limits", SCENARIOS, measure, runs, batches)


if __name__ == "__main__":
    anyio.run(main, *runs_and_batches(__doc__))
