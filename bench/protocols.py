"""How often the local models produce a readable tool call: native versus ReAct.

Each local model (``smollm2``, ``qwen``; started as ``make demo`` does) gets the same tool
task for 20 cities, under each protocol: ``native`` (the server's tool calling, with tool
calls written as text recognised: ``text_tool_calls=True``) and ``react``. A run has
``max_turns=3, return_retries=1`` at temperature 0. Counted per model and protocol:

- *first try*: the first reply was read as a tool call (a tool turn);
- *after one correction*: the first or the second reply was;
- *done*: the run ended with a valid answer.

Run: ``.venv/bin/python bench/protocols.py [--runs 20] [--models smollm2,qwen]``; it writes
``bench/results/protocols.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from pydantic import BaseModel

from subagent import OpenAIChat, RetryPolicy, Step, SubAgent, ToolPolicy, TurnOutcome, tool

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import local_llm  # noqa: E402

CITIES = [
    "Lisbon", "Oslo", "Cairo", "Lima", "Paris", "Rome", "Tokyo", "Delhi", "Sydney", "Toronto",
    "Madrid", "Berlin", "Vienna", "Dublin", "Prague", "Athens", "Seoul", "Nairobi", "Quito",
    "Hanoi", "Manila", "Bogota", "Warsaw", "Helsinki",
]  # fmt: skip


class Weather(BaseModel):
    city: str
    celsius: int


@tool(run_in_thread=False)
def current_temperature(city: str) -> str:
    """Look up the current temperature of a city, in degrees Celsius.

    Args:
        city: The city's name, e.g. Lisbon.
    """
    return f"{(sum(map(ord, city.strip().lower())) % 35) - 5} C"


def agent(protocol: str) -> SubAgent[Weather]:
    return SubAgent(
        name="weather",
        prompt=(
            "What is the current temperature in {{city}}? Look it up with the "
            "current_temperature tool, then answer."
        ),
        output=Weather,
        tools=[current_temperature],
        tool_policy=ToolPolicy(protocol=protocol),  # type: ignore[arg-type]
    )


def tool_turn_within(step: Step[Any], replies: int) -> bool:
    return any(
        turn.tool_calls and turn.outcome in (TurnOutcome.CONTINUE, TurnOutcome.ERROR)
        and turn.type.value == "normal"
        for turn in step.turns[:replies]
    )  # fmt: skip


async def measure(model: str, runs: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    with local_llm.running(model) as server:
        async with OpenAIChat(model=local_llm.MODEL_ALIAS, base_url=server.base_url,
                              timeout=180, text_tool_calls=True, _environ={}) as llm:  # fmt: skip
            for protocol in ("native", "react"):
                subject = agent(protocol)
                first = corrected = done = calls = 0
                started = time.perf_counter()
                for city in CITIES[:runs]:
                    step = await subject.run(
                        {"city": city}, llm=llm, max_turns=3, return_retries=1, timeout=180,
                        retry_policy=RetryPolicy(max_attempts=3, initial_delay=0.5),
                        settings={"temperature": 0, "seed": 7, "max_tokens": 200},
                    )  # fmt: skip
                    first += tool_turn_within(step, 1)
                    corrected += tool_turn_within(step, 2)
                    done += step.ok
                    calls += len(step.turns)
                results[protocol] = {
                    "runs": runs, "first_try": first, "after_one_correction": corrected,
                    "done": done, "llm_calls": calls,
                    "seconds": round(time.perf_counter() - started, 1),
                }  # fmt: skip
                print(f"{model:8} {protocol:6} first try {first}/{runs}, after one correction "
                      f"{corrected}/{runs}, done {done}/{runs}", flush=True)  # fmt: skip
    return results


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--models", default="smollm2,qwen")
    args = parser.parse_args(argv)
    report: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "runs": args.runs}
    for model in args.models.split(","):
        local_llm.setup([model])
        report[model] = anyio.run(measure, model, args.runs)
    out = ROOT / "bench" / "results" / "protocols.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{'model':8} {'protocol':8} {'first try':>10} {'after 1 fix':>12} {'done':>6}")
    for model in args.models.split(","):
        for protocol, r in report[model].items():
            n = r["runs"]
            print(f"{model:8} {protocol:8} {r['first_try']:>7}/{n} "
                  f"{r['after_one_correction']:>9}/{n} {r['done']:>3}/{n}")  # fmt: skip
    return report


if __name__ == "__main__":
    main()
