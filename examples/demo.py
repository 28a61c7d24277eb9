"""The quickstart agents against a real model: a local one, or yours.

    python examples/demo.py [--model qwen|qwen1.5b|smollm2]

With ``SUBAGENT_LLM`` (e.g. ``openai:gpt-4o-mini``) or ``OPENAI_BASE_URL``/``OPENAI_MODEL``
set, the agents run on that model (``OPENAI_API_KEY`` for the key). Otherwise the demo sets
up and starts a small local model with subagent.local_model (the first time it builds
llama-cpp-python and downloads the weights: several minutes), runs the agents on it, and
stops it. Last it tags a text with lowercase one-word keywords (a list output whose items
have a pattern) with a correction budget, three ways: with correction turns like the
first (``Correction()``), with correction turns sent as structured output
(``Correction(output="json_schema")``), and with the defaults (for an output that is not an
object, its corrections under the output's schema where the server has structured output).
The 0.5B's first answer holds tags that are not one lowercase word (``"Lena Fischer"``,
``"45"``); corrected like the first turn, it repeats it word for word and fails; under the
schema, the correction is a valid list. It prints one table row per turn: type, outcome, error,
tokens, seconds.

Small local models get things wrong; that is the point of the demo: the runtime records the
wrong answers, feeds back what was wrong, and ends either done or failed(budget_exhausted)
within ``max_turns + return_retries`` calls.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import anyio
from pydantic import BaseModel, Field

from subagent import Correction, OpenAIChat, RetryPolicy, Step, SubAgent, local_model

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

import quickstart  # noqa: E402


class City(BaseModel):
    city: str
    country: str
    population_millions: float


EXTRACT = SubAgent(
    name="extract",
    prompt=(
        "Extract the city, its country and its population in millions from this text:\n{{text}}"
    ),
    output=City,
)
TEXT = "Lisbon, the capital of Portugal, is home to about 0.55 million people."


def print_table(title: str, step: Step[Any]) -> None:
    print(f"\n== {title}")
    print(f"{'turn':>4}  {'type':<11} {'outcome':<8} {'tok in':>6} {'tok out':>7} {'s':>6}  error")
    for turn in step.turns:
        # feedback lists its findings as "- field: problem" lines under a heading: show the first
        lines = [line.strip() for line in (turn.error or "").strip().splitlines()]
        findings = [line[2:] for line in lines if line.startswith("- ")]
        short = (findings or lines or [""])[0][:60]
        if turn.tool_calls and not short:
            short = "called " + ", ".join(call.name for call in turn.tool_calls)
        print(
            f"{turn.index:>4}  {turn.type.value:<11} {turn.outcome.value:<8} "
            f"{turn.usage.input_tokens:>6} {turn.usage.output_tokens:>7} "
            f"{turn.duration_s:>6.2f}  {short}"
        )
    print(step.summary())
    print(f"output: {step.output!r}")


@contextlib.contextmanager
def model(choice: str) -> Iterator[OpenAIChat]:
    if OpenAIChat.env_configured():
        llm = OpenAIChat.from_env(timeout=120, text_tool_calls=True)
        print(f"using {llm.model_name} at {llm.base_url} (from the environment)")
        yield llm
        return
    print(f"no SUBAGENT_LLM/OPENAI_BASE_URL set: starting the local model {choice!r}")
    with local_model.running(choice) as server:
        # llama-cpp-python returns a model's own tool-call syntax as text: let the adapter
        # recognise it (see docs/models.md).
        yield OpenAIChat(
            model=local_model.MODEL_ALIAS, base_url=server.base_url, timeout=120,
            text_tool_calls=True,
        )  # fmt: skip


def run_options(llm: OpenAIChat) -> dict[str, Any]:
    return {
        "llm": llm,
        "timeout": 120,
        "mission_timeout": 600,
        "retry_policy": RetryPolicy(max_attempts=3, initial_delay=0.5),
        "settings": {"temperature": 0, "max_tokens": 256},
    }


async def run_agents(llm: OpenAIChat) -> list[Step[Any]]:
    options = run_options(llm)
    started = time.perf_counter()
    calc = await quickstart.agent.run(
        {"question": "17 + 25, using the add tool"}, max_turns=3, return_retries=1, **options
    )
    print_table(f"calc (quickstart agent, tools): {time.perf_counter() - started:.1f} s", calc)

    started = time.perf_counter()
    step = await EXTRACT.run({"text": TEXT}, max_turns=1, return_retries=2, **options)
    print_table(f"extract (single shot): {time.perf_counter() - started:.1f} s", step)
    return [calc, step]


Tag = Annotated[str, Field(pattern=r"^[a-z]+$")]
"""One keyword: one lowercase word."""

TAGS = SubAgent(name="tags", prompt="Tag this text with three keywords:\n{{text}}",
                output=list[Tag])  # fmt: skip
PERSON = "Lena Fischer, 45, teaches chemistry at a school in Leipzig."
CORRECTIONS = {
    "like the first turn": Correction(),
    "as structured output": Correction(output="json_schema"),
    "with the defaults": None,
}
"""How the correction turn is sent: as the failed one was, under the output's schema, or as
the library does by default (for a list, its corrections under its schema)."""


async def run_corrections(llm: OpenAIChat) -> list[Step[Any]]:
    """One tagging, corrected three ways: the correction budget at work (must_return,
    then a retry turn with the feedback), done or failed(budget_exhausted) within
    max_turns + return_retries calls."""
    options = run_options(llm)
    steps: list[Step[Any]] = []
    for how, correction in CORRECTIONS.items():
        started = time.perf_counter()
        step = await TAGS.run({"text": PERSON}, max_turns=1, return_retries=1,
                              correction=correction, **options)  # fmt: skip
        title = f"tags, corrected {how}: {time.perf_counter() - started:.1f} s"
        print_table(title, step)
        steps.append(step)
    return steps


async def run_demo(llm: OpenAIChat) -> list[Step[Any]]:
    async with llm:
        return [*await run_agents(llm), *await run_corrections(llm)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", choices=list(local_model.MODELS), default=local_model.DEFAULT_MODEL
    )
    args = parser.parse_args(argv)
    try:
        with model(args.model) as llm:
            steps = anyio.run(run_demo, llm)
    except local_model.SetupError as error:
        print(f"could not start the local model: {error}", file=sys.stderr)
        return 1
    for step in steps:  # a wrong answer is a result; a broken transport is not
        if step.failure is not None and step.failure.reason.value == "llm_error":
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
