"""Ray on local workers against `run_many` in one process: the same batch, runs per second.

S1 (one invalid then one valid structured return, ``max_turns=1, return_retries=2``) on a
scripted model that sleeps 50 ms per call (``anyio.sleep``: waiting, not computing), so the
comparison is about orchestration: the runtime's CPU per run, the event loop, the garbage
collector with many runs alive, and, on Ray, the tasks, the Steps' trip back as JSON and
their validation in the caller.

For each total concurrency C, the same N inputs run

- in one process: ``run_many(agent, contexts, concurrency=C)``;
- on Ray: ``run_on_ray("ray_scale:AGENT", contexts, shards=W, concurrency=C // W)``, W
  workers of a local runtime (``ray.init(num_cpus=W)``), warmed up first (workers started,
  modules imported), so the figure is the steady state; Ray's start-up is reported apart.

Reported: the median wall time of ``--repeat`` batches, runs per second, and Ray's speed-up.
The machine's cores are shared by the driver, the workers and Ray's own processes.

Run: ``make bench-ray`` or ``.venv/bin/python bench/ray_scale.py [--runs 4000]
[--concurrency 100,1000,4000] [--workers 2] [--repeat 3]``. Not part of ``make bench``: it
needs the ``ray`` extra and starts a Ray runtime (about 10 s).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import anyio
from pydantic import BaseModel

from subagent import LLMRequest, LLMResponse, SubAgent, run_many

SLEEP_S = 0.05
INVALID = '{"value": "three"}'
VALID = '{"value": 3}'


class Answer(BaseModel):
    value: int


class SleepyModel:
    """Sleeps 50 ms per call; answers invalid first, then valid once it was corrected."""

    model_name = "sleepy"

    async def complete(self, request: LLMRequest) -> LLMResponse:
        await anyio.sleep(SLEEP_S)
        corrected = any(message.role == "assistant" for message in request.messages)
        return LLMResponse(text=VALID if corrected else INVALID)


AGENT = SubAgent(name="s1", prompt="Compute {{question}}", output=Answer, max_turns=1,
                 return_retries=2, llm=SleepyModel())  # fmt: skip


async def in_process(runs: int, concurrency: int) -> float:
    contexts = [{"question": f"1+{n}"} for n in range(runs)]
    started = time.perf_counter()
    steps = await run_many(AGENT, contexts, concurrency=concurrency, progress=False)
    elapsed = time.perf_counter() - started
    assert all(step.ok and len(step.turns) == 2 for step in steps)
    return elapsed


async def on_ray(runs: int, concurrency: int, workers: int) -> float:
    from subagent.ray import run_on_ray

    contexts = [{"question": f"1+{n}"} for n in range(runs)]
    started = time.perf_counter()
    steps = await run_on_ray("ray_scale:AGENT", contexts, shards=workers,
                             concurrency=max(1, concurrency // workers))  # fmt: skip
    elapsed = time.perf_counter() - started
    assert all(step.ok and len(step.turns) == 2 for step in steps)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=4000)
    parser.add_argument("--concurrency", default="100,1000,4000")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    levels = [int(level) for level in args.concurrency.split(",")]

    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    started = time.perf_counter()
    # The workers import this file as `ray_scale`: Ray puts the script's folder on their path.
    ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
    init_s = time.perf_counter() - started
    warm_s = anyio.run(on_ray, 2 * args.workers, args.workers, args.workers)
    print(f"Ray: {args.workers} workers; ray.init {init_s:.1f} s, first batch (workers "
          f"start) {warm_s:.1f} s; load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    print(f"S1 on a model sleeping {SLEEP_S * 1000:.0f} ms per call (2 calls per run), "
          f"{args.runs} runs, median of {args.repeat}")  # fmt: skip
    print()
    print(f"| in flight | one process | runs/s | Ray, {args.workers} workers | runs/s "
          "| Ray / one process |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- |")
    for level in levels:
        local = statistics.median(anyio.run(in_process, args.runs, level)
                                  for _ in range(args.repeat))  # fmt: skip
        remote = statistics.median(anyio.run(on_ray, args.runs, level, args.workers)
                                   for _ in range(args.repeat))  # fmt: skip
        print(f"| {level:,} | {local:.2f} s | {args.runs / local:,.0f} | {remote:.2f} s | "
              f"{args.runs / remote:,.0f} | {local / remote:.2f}x |", flush=True)  # fmt: skip
    ray.shutdown()


if __name__ == "__main__":
    main()
