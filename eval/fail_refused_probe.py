"""The correction study's probe of explicit fails: refused on the final work turn, what then?

    python eval/fail_refused_probe.py --model qwen1.5b

On the 1.5B, 8 of ``make eval``'s 32 typed tasks end at once with ``{"fail": ...}`` ("the
text does not contain...") on their first attempt, a correction budget left unused. This
runs those cases (the ones whose first attempt failed explicitly in the study's records)
with ``Correction(when="final", allow_fail=False)``: the final work turn is sent as before
(text), but a fail on it or on a correction is fed back as an answer to correct; the
corrections as text (``fail-refused``) or under the output's schema
(``fail-refused-structured``, the first attempt then under the schema too). Records go to
``eval/results/corrections/<model>/fail-refused.jsonl``.

With ``--all``, every typed task runs once more with the final work turn and its
corrections under the schema (``structured-final``: ``Correction(output="json_schema",
when="final")``, ``return_retries=1``), into ``structured-final.jsonl``: what the schema
does to a first attempt, beside the study's free first attempts.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import correction_study

from subagent import Correction
from subagent.evals import Dataset, Variant

VARIANTS = [
    Variant("fail-refused", {"correction": Correction(when="final", allow_fail=False)}),
    Variant(
        "fail-refused-structured",
        {
            "correction": Correction(output="json_schema", when="final", allow_fail=False),
        },
    ),
]


def explicit_fails(records: Path) -> set[str]:
    """The cases whose first attempt ended with an explicit fail in the study's records."""
    names = set()
    for line in records.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        failure = record["step"].get("failure") or {}
        if record["variant"] == "same-r0" and failure.get("reason") == "explicit_fail":
            names.add(record["case"])
    return names


async def probe(args: argparse.Namespace, base_url: str) -> None:
    """Run the probe's variants on the model at ``base_url``, records beside the study's."""
    (dataset,), agent_of, options = correction_study._tasks(args)
    folder = correction_study.RESULTS / args.model
    if args.all:
        final = Variant(
            "structured-final", {"correction": Correction(output="json_schema", when="final")}
        )
        async with correction_study._chat(base_url) as llm:
            report = await dataset.evaluate(
                agent_of, [final], out=folder / "structured-final.jsonl", concurrency=1,
                llm=llm, return_retries=1, **options,
            )  # fmt: skip
        print(report.to_markdown())
        return
    failed = explicit_fails(folder / "tasks.jsonl")
    cases = [case for case in dataset.cases if case.name in failed]
    print(f"{len(cases)} cases whose first attempt failed explicitly", flush=True)
    async with correction_study._chat(base_url) as llm:
        report = await Dataset(cases, dataset.judges, name="fail-refused").evaluate(
            agent_of, VARIANTS, out=folder / "fail-refused.jsonl", concurrency=1,
            llm=llm, return_retries=1, **options,
        )  # fmt: skip
    print(report.to_markdown())


def main() -> None:
    """The command line: start the local model, run the probe, print its report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen1.5b")
    parser.add_argument("--all", action="store_true", help="structured-final on every task")
    correction_study.on_model(probe, parser.parse_args())


if __name__ == "__main__":
    main()
