"""Thousands of runs in flight at once: subagent against a bare loop doing the same work.

S1 (one invalid then one valid structured return, ``max_turns=1, return_retries=2``) on a
scripted model that sleeps 50 ms per call, N runs started together in one anyio task group,
side by side with a bare hand-written loop doing the same work per run (the same sleeps, a
JSON decode and pydantic validation per reply, a feedback message for the invalid one). The
interpreter's default garbage-collector settings are kept: the point is what thousands of
live runs cost the collector, which grows with what each run keeps alive and allocates.

Reported per N: wall seconds of each, their ratio, and (measured in a separate pass with
no timing) the objects the collector tracks and the Python memory allocated per in-flight
run, at the plateau where every run is waiting on its first model call.

Run: ``.venv/bin/python bench/concurrency.py [--sizes 1000,3000,10000] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from pydantic import BaseModel, ValidationError

from subagent import LLMRequest, LLMResponse, SubAgent

SLEEP_S = 0.05
INVALID = '{"value": "three"}'
VALID = '{"value": 3}'


class Answer(BaseModel):
    value: int


AGENT = SubAgent(name="s1", prompt="Compute {{question}}", output=Answer)
CONTEXT = {"question": "1+2"}


class SleepyModel:
    """Answers invalid, then valid, after sleeping 50 ms per call."""

    __slots__ = ("_calls",)
    model_name = "sleepy"

    def __init__(self) -> None:
        self._calls = 0

    async def complete(self, request: LLMRequest) -> LLMResponse:
        await anyio.sleep(SLEEP_S)
        self._calls += 1
        return LLMResponse(text=INVALID if self._calls == 1 else VALID)


async def subagent_run(ready: anyio.Event | None = None) -> None:
    step = await AGENT.run(CONTEXT, llm=SleepyModel(), max_turns=1, return_retries=2)
    assert step.ok and len(step.turns) == 2


async def bare_run(ready: anyio.Event | None = None) -> None:
    """The same work without a framework: two calls, a decode, a validation, feedback."""
    messages = [{"role": "system", "content": "Reply with JSON."},
                {"role": "user", "content": "Compute 1+2"}]  # fmt: skip
    for reply in (INVALID, VALID):
        await anyio.sleep(SLEEP_S)
        try:
            answer = Answer.model_validate(json.loads(reply))
        except ValidationError as exc:
            messages.append({"role": "assistant", "content": reply})
            messages.append({"role": "user", "content": f"Fix these errors: {exc.errors()}"})
            continue
        assert answer.value == 3
        return
    raise AssertionError("no valid answer")


async def wall(run: Callable[[], Awaitable[None]], count: int) -> float:
    start = time.perf_counter()
    async with anyio.create_task_group() as group:
        for _ in range(count):
            group.start_soon(run)
    return time.perf_counter() - start


async def in_flight_cost(run: Callable[[], Awaitable[None]], count: int) -> tuple[float, float]:
    """(tracked objects, bytes allocated) per run while ``count`` runs wait on a call."""
    gc.collect()
    objects_before = len(gc.get_objects())
    tracemalloc.start()
    before, _ = tracemalloc.get_traced_memory()
    async with anyio.create_task_group() as group:
        for _ in range(count):
            group.start_soon(run)
        await anyio.sleep(SLEEP_S / 2)  # every run has started and waits on its first call
        objects = len(gc.get_objects()) - objects_before
        current, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return objects / count, (current - before) / count


async def measure(sizes: list[int], repeat: int) -> dict[str, Any]:
    await wall(subagent_run, 200)  # warm-up: imports, schemas, the phase machine's replay
    await wall(bare_run, 200)
    results: dict[str, Any] = {}
    for count in sizes:
        ours, bare = [], []
        for _ in range(repeat):  # alternate, so drift on a shared machine cancels
            ours.append(await wall(subagent_run, count))
            bare.append(await wall(bare_run, count))
        objects, memory = await in_flight_cost(subagent_run, min(count, 3000))
        bare_objects, bare_memory = await in_flight_cost(bare_run, min(count, 3000))
        results[str(count)] = {
            "subagent_s": statistics.median(ours),
            "bare_s": statistics.median(bare),
            "ratio": statistics.median(ours) / statistics.median(bare),
            "objects_per_run": objects,
            "bare_objects_per_run": bare_objects,
            "kib_per_run": memory / 1024,
            "bare_kib_per_run": bare_memory / 1024,
        }
    return results


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes", default="1000,3000,10000", help="runs in flight, comma-separated"
    )
    parser.add_argument("--repeat", type=int, default=3, help="timed batches per size and side")
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.sizes.split(",")]
    results = anyio.run(measure, sizes, args.repeat)
    print(f"concurrency: S1 with {SLEEP_S * 1000:.0f} ms per call, default gc thresholds "
          f"{gc.get_threshold()}, median of {args.repeat}")  # fmt: skip
    print(f"  {'runs':>6} {'subagent s':>11} {'bare s':>8} {'ratio':>6} "
          f"{'objects/run':>12} {'bare':>6} {'KiB/run':>8} {'bare':>6}")  # fmt: skip
    for count, r in results.items():
        print(f"  {int(count):>6} {r['subagent_s']:>11.2f} {r['bare_s']:>8.2f} {r['ratio']:>6.2f} "
              f"{r['objects_per_run']:>12.1f} {r['bare_objects_per_run']:>6.1f} "
              f"{r['kib_per_run']:>8.1f} {r['bare_kib_per_run']:>6.1f}")  # fmt: skip
    return results


if __name__ == "__main__":
    main()
