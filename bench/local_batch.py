"""``run_many`` against the local model server, versus the same runs one after another.

The local server (llama-cpp-python, started as ``make demo`` does) has a single slot: it
computes one completion at a time and queues the others. So a batch cannot finish sooner
by sending more at once; what concurrency can still buy is overlap of the client's own
work (rendering, parsing, validation) with the server's, and what it can cost is queueing.
This measures both on the same tasks, alternating the modes so that drift cancels:

- *sequential*: ``await agent.run(...)`` for each task in turn;
- *run_many, concurrency=C*: the same tasks through :func:`subagent.run_many`.

Every mode runs the same tasks at temperature 0 with a fixed seed, so the replies (and the
turns spent) are the same; the table shows that too.

Run: ``.venv/bin/python bench/local_batch.py [--model qwen] [--tasks 12] [--rounds 2]``; it
writes ``bench/results/local_batch.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from pydantic import BaseModel

from subagent import OpenAIChat, Step, SubAgent, run_many

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import local_llm  # noqa: E402


class Sum(BaseModel):
    value: int


ADD = SubAgent(name="add", prompt="What is {{a}} + {{b}}? Answer with the sum.", output=Sum)
OPTIONS: dict[str, Any] = {
    "max_turns": 1, "return_retries": 1, "timeout": 120,
    "settings": {"temperature": 0, "seed": 7, "max_tokens": 40},
}  # fmt: skip
CONCURRENCY = (1, 4, 16)


def tasks(count: int) -> list[dict[str, int]]:
    return [{"a": 10 + 7 * n, "b": 3 + 5 * n} for n in range(count)]


async def sequential(llm: OpenAIChat, contexts: list[dict[str, int]]) -> list[Step[Sum]]:
    return [await ADD.run(context, llm=llm, **OPTIONS) for context in contexts]


async def batch(
    llm: OpenAIChat, contexts: list[dict[str, int]], concurrency: int
) -> list[Step[Sum]]:
    return await run_many(ADD, contexts, concurrency=concurrency, progress=False, llm=llm,
                          **OPTIONS)  # fmt: skip


async def measure(model: str, count: int, rounds: int) -> dict[str, Any]:
    contexts = tasks(count)
    seconds: dict[str, list[float]] = {"sequential": []}
    seconds.update({f"run_many c={c}": [] for c in CONCURRENCY})
    outcomes: dict[str, tuple[int, int]] = {}
    with local_llm.running(model) as server:
        async with OpenAIChat(model=local_llm.MODEL_ALIAS, base_url=server.base_url,
                              timeout=120, _environ={}) as llm:  # fmt: skip
            await sequential(llm, contexts[:2])  # warm the server's prompt cache
            for _ in range(rounds):
                for mode in seconds:
                    started = time.perf_counter()
                    if mode == "sequential":
                        steps = await sequential(llm, contexts)
                    else:
                        steps = await batch(llm, contexts, int(mode.split("=")[1]))
                    seconds[mode].append(time.perf_counter() - started)
                    correct = sum(
                        s.ok and s.output is not None and s.output.value == c["a"] + c["b"]
                        for s, c in zip(steps, contexts, strict=True)
                    )
                    outcomes[mode] = (correct, sum(len(s.turns) for s in steps))
    base = statistics.median(seconds["sequential"])
    return {
        mode: {
            "runs": count,
            "median_s": round(statistics.median(times), 2),
            "runs_per_s": round(count / statistics.median(times), 2),
            "vs_sequential": round(statistics.median(times) / base, 2),
            "correct": outcomes[mode][0],
            "llm_calls": outcomes[mode][1],
        }
        for mode, times in seconds.items()
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen", choices=list(local_llm.MODELS))
    parser.add_argument("--tasks", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    local_llm.setup([args.model])
    results = anyio.run(measure, args.model, args.tasks, args.rounds)
    report = {
        "date": time.strftime("%Y-%m-%d"),
        "model": args.model,
        "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} cores",
        "server": "llama-cpp-python, one slot, one thread",
        "rounds": args.rounds,
        "results": results,
    }
    out = ROOT / "bench" / "results" / "local_batch.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{'mode':<16} {'median s':>9} {'runs/s':>7} {'vs seq':>7} {'correct':>8} {'calls':>6}")
    for mode, r in results.items():
        correct = f"{r['correct']}/{r['runs']}"
        print(f"{mode:<16} {r['median_s']:>9.2f} {r['runs_per_s']:>7.2f} "
              f"{r['vs_sequential']:>7.2f} {correct:>8} {r['llm_calls']:>6}")  # fmt: skip
    return report


if __name__ == "__main__":
    main()
