"""Do correction turns sampled differently buy more? BFCL cases whose correction ran, rerun.

    python eval/retry_sampling.py --base-url URL [--temperature 0.7]
                                  [--systems subagent-r1,subagent-r2]

For each system, the cases of its committed records (``eval/results/bfcl/``) in which a
correction (a ``retry`` turn) ran are run again twice on the server at ``URL``, as two
``subagent.evals`` variants of the system: as it is (temperature 0 on every turn,
``<system>@t0``) and with the ``retry`` turns alone at ``--temperature`` (same seed,
``<system>@t0.7``: the model wrapped by :class:`CorrectionSampling`). The turns before the
first correction send the same requests both ways, so the difference is what the
correction's sampling does. Records in ``eval/results/retry-sampling/<variant>.jsonl``
(resumable); prints, per variant: cases, ended correct, corrections and the corrections
that repeat the reply before them.

When the loop takes correction settings of its own, the second variant is the first with
that run option instead of the wrapper: one more key of its options.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bfcl_data import DEFAULT_CATEGORIES, BfclChecker, load_cases
from bfcl_systems import SEED, BfclSystem, Server, system_named
from run_bfcl import RESULTS, client_for, record_path

from subagent.evals import Case, Dataset, Outcome, Report, Variant, read_records

__all__ = ["CorrectionSampling", "corrected_cases", "sampled_variant", "summary"]

OUT = Path(__file__).resolve().parent / "results" / "retry-sampling"
SYSTEMS = ("subagent-r1", "subagent-r2")


class CorrectionSampling:
    """An LLM that sends its ``retry`` turns with ``settings`` merged over theirs."""

    def __init__(self, llm: Any, settings: Mapping[str, Any]) -> None:
        self.llm = llm
        self.settings = dict(settings)

    @property
    def model_name(self) -> str:
        """The wrapped model's name."""
        return str(getattr(self.llm, "model_name", "model"))

    async def complete(self, request: Any) -> Any:
        """Answer ``request``, a ``retry`` turn's with the other settings."""
        if request.turn is not None and request.turn.type == "retry":
            request = request.model_copy(update={"settings": {**request.settings, **self.settings}})
        return await self.llm.complete(request)


def sampled_variant(system: BfclSystem, temperature: float, llm: Any) -> Variant:
    """``system`` as it is (``temperature`` 0), or with its corrections at ``temperature``."""
    name = f"{system.name}@t{temperature:g}"
    if temperature == 0:
        return Variant(name, system.options)
    sampling = CorrectionSampling(llm, {"temperature": temperature, "seed": SEED})
    return Variant(name, {**system.options, "llm": sampling})


def corrected_cases(path: Path, cases: Mapping[str, Case[Any]]) -> list[Case[Any]]:
    """The cases of the records in ``path`` in which a correction turn ran, as they are now."""
    chosen = []
    for record in read_records(path):
        case = cases.get(record["case"])
        current = case is not None and case.digest == record["case_digest"]
        if current and Outcome.from_record(record).corrected:
            chosen.append(case)  # type: ignore[arg-type]
    return chosen


def summary(path: Path) -> dict[str, int]:
    """Cases, ended correct, corrections run and repeated corrections in ``path``'s records."""
    (result,) = Report.read(path).variants
    return {
        "cases": result.runs,
        "correct": result.correct,
        "corrections": result.correction_turns,
        "repeats": result.repeated_corrections,
    }


async def _run(system: BfclSystem, temperature: float, cases: Sequence[Case[Any]],
               server: Server, path: Path) -> None:  # fmt: skip
    async with client_for(system, server) as chat:
        chosen = Dataset(cases, [BfclChecker()], name="bfcl")
        await chosen.evaluate(system.target(server, chat),
                              [sampled_variant(system, temperature, chat)], out=path, llm=chat,
                              concurrency=1, progress=True)  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    cases = {c.name: c for category in DEFAULT_CATEGORIES for c in load_cases(category)}
    server = Server(base_url=args.base_url)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.systems.split(","):
        system = system_named(name)
        chosen = corrected_cases(record_path(RESULTS, name, "template"), cases)
        for temperature in (0.0, args.temperature):
            path = args.out / f"{name}@t{temperature:g}.jsonl"
            anyio.run(_run, system, temperature, chosen, server, path)
            print(f"{name} t={temperature:g}", summary(path), flush=True)


if __name__ == "__main__":
    main()
