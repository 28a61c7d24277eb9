"""What an evaluation costs on top of its runs, the memory it holds, and its A/A false alarms.

- **Overhead per case** (1,000 cases, one variant): the same runs through ``stream_many``
  alone, against ``Dataset.evaluate`` without a records file (a judge, the report) and
  with one (each run's record written and flushed). The scripted model answers the first
  attempt invalid for a third of the cases (one correction each), so a run is S1-like:
  one or two calls. On an instant model: CPU time, the least of alternating rounds; on a
  model answering in 5 ms: wall time, 8 runs at a time. Reported: µs per case of each, and
  what the harness adds, against the runs' own time.
- **Memory** (1,000 and 10,000 cases, records written): the peak of Python allocations
  (tracemalloc) during the evaluation and its report, the dataset already built; and, for
  scale, ``run_many`` of the same runs, which keeps every Step.
- **A/A**: the same variant evaluated twice on a model that is right on its first attempt
  with probability 0.7 and on its correction with probability 0.5 (seeded, 200 cases,
  ``return_retries=1``), compared, for ``--aa`` seeds: the share of comparisons that flag
  anything (success, salvage or cost).

Run: ``.venv/bin/python bench/evals.py [--cases 1000] [--memory 1000,10000] [--aa 200]``.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import re
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from pydantic import BaseModel

from subagent import LLMRequest, LLMResponse, SubAgent, Usage, run_many, stream_many
from subagent.evals import Case, Dataset, EqualsExpected


class Answer(BaseModel):
    value: int


AGENT = SubAgent(name="adder", prompt="What is {{a}} + {{b}}?", output=Answer, max_turns=1,
                 return_retries=1)  # fmt: skip


def uniform(*parts: object) -> float:
    return int.from_bytes(hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()) / 2**64


class Coin:
    """Right first with probability ``first`` (per case and seed), else right after a
    correction with probability ``fix``; 100 prompt and 5 completion tokens a call;
    instant, or after ``latency`` seconds."""

    model_name = "coin"

    def __init__(self, seed: object = 0, first: float = 2 / 3, fix: float = 1.0,
                 latency: float = 0.0):  # fmt: skip
        self.seed = seed
        self.first = first
        self.fix = fix
        self.latency = latency

    async def complete(self, request: LLMRequest) -> LLMResponse:
        if self.latency:
            await anyio.sleep(self.latency)
        a, b = (int(n) for n in re.findall(r"\d+", str(request.messages[1].content))[:2])
        retry = any(m.role == "assistant" for m in request.messages)
        usage = Usage(input_tokens=100, output_tokens=5)
        if uniform(self.seed, a, b, retry) < (self.fix if retry else self.first):
            return LLMResponse(text=f'{{"value": {a + b}}}', usage=usage)
        return LLMResponse(text='{"value": "many"}', usage=usage)


def dataset(count: int) -> Dataset[Answer]:
    cases = [Case(name=f"c{n}", context={"a": n, "b": 1}, expected=Answer(value=n + 1))
             for n in range(count)]  # fmt: skip
    return Dataset(cases, [EqualsExpected()], name="bench")


async def cpu_alternating(
    runs: dict[str, Callable[[], Awaitable[Any]]], repeat: int
) -> dict[str, float]:
    """The least CPU seconds each of ``runs`` took over ``repeat`` rounds, after a warm-up.

    The runs alternate round by round, so a disturbance (the machine is shared) hits them
    alike; the least time is the least disturbed one.
    """
    for run in runs.values():
        await run()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeat):
        for name, run in runs.items():
            gc.collect()
            start = time.process_time()
            await run()
            times[name].append(time.process_time() - start)
    return {name: min(values) for name, values in times.items()}


async def wall_alternating(
    runs: dict[str, Callable[[], Awaitable[Any]]], repeat: int
) -> dict[str, float]:
    """The median wall seconds of each of ``runs`` over ``repeat`` alternating rounds."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeat):
        for name, run in runs.items():
            start = time.perf_counter()
            await run()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


async def overhead(count: int, repeat: int, latency: float = 0.0) -> dict[str, float]:
    """µs per case of the runs alone, an evaluation, and one with records.

    An instant model: CPU time (the least of ``repeat`` rounds); a model with ``latency``:
    wall time (the median), the runs 8 at a time.
    """
    cases = dataset(count)
    contexts = [case.context for case in cases]
    model = Coin(latency=latency)
    folder = Path(tempfile.mkdtemp())

    async def batch_alone() -> None:
        async with stream_many(AGENT, contexts, llm=model, progress=False) as batch:
            async for _ in batch:
                pass

    async def evaluate_in_memory() -> None:
        report = await cases.evaluate(AGENT, llm=model, progress=False)
        assert report.variants[0].runs == count

    written = iter(range(1_000_000))

    async def evaluate_recorded() -> None:
        out = folder / f"records-{next(written)}.jsonl"
        report = await cases.evaluate(AGENT, llm=model, progress=False, out=out)
        assert report.variants[0].runs == count

    runs = {"batch": batch_alone, "evaluate": evaluate_in_memory,
            "evaluate + records": evaluate_recorded}  # fmt: skip
    measure = wall_alternating if latency else cpu_alternating
    results = await measure(runs, repeat)
    return {name: seconds / count * 1e6 for name, seconds in results.items()}


async def memory(count: int, steps: bool = False) -> float:
    """The peak MiB allocated during an evaluation with records (the dataset built before);
    with ``steps``, during ``run_many`` of the same runs instead (every Step kept)."""
    cases = dataset(count)
    model = Coin()
    with tempfile.TemporaryDirectory() as folder:
        gc.collect()
        tracemalloc.start()
        base, _ = tracemalloc.get_traced_memory()
        if steps:
            kept = await run_many(AGENT, [case.context for case in cases], llm=model)
            assert len(kept) == count
        else:
            report = await cases.evaluate(AGENT, llm=model, progress=False,
                                          out=Path(folder) / "records.jsonl")  # fmt: skip
            assert report.variants[0].runs == count
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return (peak - base) / 2**20


async def false_alarms(seeds: int, cases: int = 200) -> tuple[int, int]:
    flagged = 0
    data = dataset(cases)
    for seed in range(seeds):
        first = await data.evaluate(AGENT, llm=Coin((seed, "a"), 0.7, 0.5), progress=False)
        second = await data.evaluate(AGENT, llm=Coin((seed, "b"), 0.7, 0.5), progress=False)
        flagged += any(change.significant for change in second.compare(first).changes)
    return flagged, seeds


async def main(cases: int = 1000, sizes: tuple[int, ...] = (1000, 10_000), aa: int = 200,
               repeat: int = 7) -> dict[str, Any]:  # fmt: skip
    print("evaluations (subagent.evals; scripted models; asyncio)")
    results: dict[str, Any] = {}
    for latency, unit in ((0.0, "CPU µs"), (0.005, "wall µs")):
        per_case = await overhead(cases, repeat if not latency else 3, latency)
        results[f"latency {latency}"] = per_case
        run = per_case["batch"]
        model = "an instant model" if not latency else f"a model answering in {latency * 1e3:g} ms"
        print(f"  {cases} cases on {model}, {unit} per case: the runs alone "
              f"(stream_many) {run:.0f}")  # fmt: skip
        for name in ("evaluate", "evaluate + records"):
            added = per_case[name] - run
            print(f"    {name:<20} {per_case[name]:.0f} ({added:+.0f}, {added / run:+.1%})")
    for size in sizes:
        peak = await memory(size)
        kept = await memory(size, steps=True)
        results[f"memory {size}"] = (peak, kept)
        print(f"  memory, {size:>6} cases: evaluation with records, peak {peak:.1f} MiB "
              f"({peak * 2**20 / size:,.0f} B/case); run_many keeping every Step: "
              f"{kept:.1f} MiB")  # fmt: skip
    if aa:
        flagged, seeds = await false_alarms(aa)
        results["aa_false_positive_rate"] = flagged / seeds
        print(f"  A/A: {flagged} of {seeds} seeded comparisons (200 cases each) flagged a change "
              f"({flagged / seeds:.1%})")  # fmt: skip
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--memory", default="1000,10000")
    parser.add_argument("--aa", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    sizes = tuple(int(size) for size in args.memory.split(",") if size)
    anyio.run(lambda: main(args.cases, sizes, args.aa, args.repeat))
