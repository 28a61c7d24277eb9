"""BFCL with the final work turn under a grammar: what structured output does to tool calls.

    python eval/bfcl_structured.py --model qwen1.5b [--cases 20] [--offset 0]
        [--categories simple_python,...] [--variants structured-final,...] [--base-url URL]
        [--results DIR]

The correction study's ``contract`` agent (its output is the list of calls, the functions
in its instructions), ``max_turns=1``, ``return_retries=1``, with its final work turn and
its correction sent as the server's structured output
(``Correction(output="json_schema", when="final")``), two ways:

- ``structured-final``: the grammar of the output's own schema, any list of
  ``{"name", "arguments"}`` (a shape; the names and values are free);
- ``structured-final-exact``: the grammar of *this request's* calls
  (``Correction(json_schema=...)``): each call one of the case's functions by name, its
  arguments that function's parameters, typed, enums and required ones included. The
  prompt is the same in both: only the grammar differs.

The free first attempt on the same cases is the study's ``same-r0`` / ``same-r1``
(``eval/correction_study.py --benchmark bfcl``). Records go to
``eval/results/corrections/<model>/bfcl-structured.jsonl`` (resumable; with ``--offset``,
``bfcl-structured-from-<offset>.jsonl``: the held-out sample is the 20 cases after the
first 50 of each category).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bfcl_data
import correction_study
from bfcl_systems import CALL_TIMEOUT, SETTINGS, ContractAgent

from subagent import Correction, SubAgent
from subagent.evals import Case, Variant

__all__ = ["VARIANTS"]

FINAL = Correction(output="json_schema", when="final")

VARIANTS = [
    Variant("structured-final", {"return_retries": 1, "correction": FINAL}),
    # The agent of each case carries its own exact grammar (see exact_agent).
    Variant("structured-final-exact", {"return_retries": 1}),
]


def exact_agent(case: Case[Any]) -> SubAgent[Any]:
    """The contract agent of ``case``, its final turn under the grammar of its own calls."""
    schema = bfcl_data.calls_schema(case)
    correction = Correction(output="json_schema", when="final", json_schema=schema)
    return dataclasses.replace(ContractAgent()(case), correction=correction)


async def structured(args: argparse.Namespace, base_url: str) -> None:
    """Run both variants on the model at ``base_url``; print each category's report."""
    suffix = f"-from-{args.offset}" if args.offset else ""
    out = args.results / args.model / f"bfcl-structured{suffix}.jsonl"
    variants = [v for v in VARIANTS if v.name in args.variants.split(",")]
    out.parent.mkdir(parents=True, exist_ok=True)
    async with correction_study._chat(base_url) as llm:
        for category in [c for c in args.categories.split(",") if c]:
            dataset = bfcl_data.dataset(category, args.cases, args.offset)
            report = await dataset.evaluate(
                exact_agent, variants, out=out, concurrency=1, llm=llm, max_turns=1,
                settings=SETTINGS, timeout=CALL_TIMEOUT,
            )  # fmt: skip
            print(report.to_markdown(), flush=True)


def main() -> None:
    """The command line: start the local model, run both variants, print the reports."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen1.5b")
    parser.add_argument("--categories", default=",".join(bfcl_data.DEFAULT_CATEGORIES))
    parser.add_argument("--cases", type=int, default=20)
    parser.add_argument("--offset", type=int, default=0)
    parser.add_argument("--variants", default=",".join(v.name for v in VARIANTS))
    parser.add_argument("--base-url", default=None)
    parser.add_argument("--results", type=Path, default=correction_study.RESULTS)
    correction_study.on_model(structured, parser.parse_args())


if __name__ == "__main__":
    main()
