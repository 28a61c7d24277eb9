"""Do correction turns sampled differently buy more? BFCL cases whose correction ran, rerun.

    python eval/retry_sampling.py --base-url URL [--temperature 0.7]
                                  [--systems subagent-r1,subagent-r2]

For each system, the cases of its committed records (``eval/results/bfcl/``) in which a
correction (a ``retry`` turn) ran are run again twice on the server at ``URL``: as the
system is (temperature 0 on every turn) and with the ``retry`` turns alone at
``--temperature`` (same seed). The turns before the first correction send the same requests
both ways, so the difference is what the correction's sampling does. One JSON line per case
and variant in ``eval/results/retry-sampling/<system>@t<temperature>.jsonl`` (resumable);
prints, per system and variant: cases, ended correct, and the corrections that repeat the
reply before them word for word.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bfcl_data import DEFAULT_CATEGORIES, Case, grade, load_cases
from bfcl_systems import SEED, Outcome, Server, elapsed, system_named
from run_bfcl import RESULTS, append_line, client_for, pending, read_lines, record_path

__all__ = ["CorrectionSampling", "corrected_cases", "repeats", "summary"]

OUT = Path(__file__).resolve().parent / "results" / "retry-sampling"
SYSTEMS = ("subagent-r1", "subagent-r2")


class CorrectionSampling:
    """An LLM that sends its ``retry`` turns with ``settings`` merged over theirs."""

    def __init__(self, llm: Any, settings: Mapping[str, Any]) -> None:
        self.llm = llm
        self.settings = dict(settings)

    async def complete(self, request: Any) -> Any:
        """Answer ``request``, a ``retry`` turn's with the other settings."""
        if request.turn is not None and request.turn.type == "retry":
            request = request.model_copy(update={"settings": {**request.settings, **self.settings}})
        return await self.llm.complete(request)


def corrected_cases(records: Sequence[Mapping[str, Any]], cases: Mapping[str, Case]) -> list[Case]:
    """The cases of ``records`` in which a correction turn ran (a turn after the first)."""
    return [
        cases[r["id"]]
        for r in records
        if len(r["outcome"]["turns"]) > 1 and r["id"] in cases
        and cases[r["id"]].digest == r["digest"]
    ]  # fmt: skip


def repeats(outcome: Mapping[str, Any]) -> int:
    """Replies of a case that repeat the reply before them word for word."""
    texts = [turn["text"] for turn in outcome["turns"]]
    return sum(1 for before, after in itertools.pairwise(texts) if before == after)


def summary(lines: Sequence[Mapping[str, Any]], cases: Mapping[str, Case]) -> dict[str, int]:
    """Cases, ended correct, corrections run and verbatim repeats among ``lines``."""
    return {
        "cases": len(lines),
        "correct": sum(grade(cases[r["id"]], r["outcome"]["calls"])[0] for r in lines),
        "corrections": sum(max(0, len(r["outcome"]["turns"]) - 1) for r in lines),
        "repeats": sum(repeats(r["outcome"]) for r in lines),
    }


async def _run(name: str, temperature: float, todo: Sequence[Case], server: Server,
               path: Path) -> None:  # fmt: skip
    system = system_named(name)
    async with await client_for(system, server) as chat:
        llm = chat if temperature == 0 else CorrectionSampling(
            chat, {"temperature": temperature, "seed": SEED}
        )  # fmt: skip
        for case in todo:
            started = time.perf_counter()
            outcome: Outcome = await system.run(case, server, llm)
            outcome.seconds = elapsed(started)
            append_line(path, {"system": name, "temperature": temperature,
                               "category": case.category, "id": case.id, "digest": case.digest,
                               "outcome": outcome.to_json()})  # fmt: skip
            print(f"  {name} t={temperature} {case.id}: {grade(case, outcome.calls)[0]}",
                  flush=True)  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    cases = {c.id: c for category in DEFAULT_CATEGORIES for c in load_cases(category)}
    server = Server(base_url=args.base_url)
    args.out.mkdir(parents=True, exist_ok=True)
    for system in args.systems.split(","):
        chosen = corrected_cases(read_lines(record_path(RESULTS, system, "template")), cases)
        for temperature in (0.0, args.temperature):
            path = args.out / f"{system}@t{temperature:g}.jsonl"
            anyio.run(_run, system, temperature, pending(chosen, path), server, path)
            print(system, f"t={temperature:g}", summary(read_lines(path), cases), flush=True)


if __name__ == "__main__":
    main()
