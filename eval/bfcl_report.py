"""`make eval-report` (BFCL part): the records of ``eval/results/bfcl/`` through the evals report.

    python eval/bfcl_report.py [--results DIR] [--print-only] [--no-plot]

Every record is a ``subagent.evals`` record (``run_bfcl.py``), graded when it ran by BFCL's
checker as an evals judge; the figures are ``subagent.evals.Report``'s, per category
(``Report.tagged``) and system (its variant, ``<system>@<set-up>``): accuracy with its 95%
Wilson interval, LLM calls and prompt tokens per case, tokens per correct case, *corrected,
then right* (the evals report's salvage: of the cases whose answer was refused, so a
correction turn ran, those that ended correct) and the repeated corrections. What this
module adds are BFCL's own views, thin layers on those outcomes:

- derived systems, graded here from the records alone: ``raw-lenient`` (and
  ``raw-prompted-lenient``), the same replies as ``raw``'s, their text read as a JSON call
  when the server returned no native call; ``subagent-choose-r1``, the answer
  ``bfcl_systems.chosen_calls`` picks from its two parts' records
  (``bfcl_systems.CHOOSE_PARTS``) on the cases both ran, at the cost of both runs;
- *salvaged*: of the cases whose first attempt was wrong (graded by the checker, valid or
  not), those that ended correct (systems that can correct themselves only);
- on ``irrelevance``, the answers apart from the failures: a failed run is never scored as
  an answer, so "answered with no call" (correct) is counted apart from "no call because
  the run failed" (wrong, for every system alike: a raw call's or a peer's failure is an
  exception it raised, a subagent run's its failure reason);
- the case-for-case tables (the systems on the cases all of them ran) and the plot.

Writes the part of ``docs/evaluation.md`` between the ``bfcl-report`` markers, and
``docs/images/bfcl.png``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bfcl_data import category, function_names, grade, load_cases  # noqa: E402
from bfcl_systems import (  # noqa: E402
    CHOOSE_PARTS,
    SYSTEMS,
    calls_in_text,
    chosen_calls,
    first_attempt,
)
from run_bfcl import RESULTS  # noqa: E402

from subagent.evals import Case, Outcome, Report, VariantResult, read_records  # noqa: E402

__all__ = [
    "AGAINST_PEERS",
    "HEAD_TO_HEAD",
    "PAGE",
    "Graded",
    "Row",
    "graded",
    "head_to_head",
    "render",
    "render_head_to_head",
    "rows_from",
    "section",
    "update_page",
    "write_report",
]

PAGE = ROOT / "docs" / "evaluation.md"
PLOT = ROOT / "docs" / "images" / "bfcl.png"
START = "<!-- bfcl-report:start (make eval-report writes this part) -->"
END = "<!-- bfcl-report:end -->"
CHOSEN = "subagent-choose-r1"
_CORRECTING = {system.name for system in SYSTEMS if system.corrects}


@dataclass
class Graded:
    """The records of a folder, graded: an outcome per record and per derived system.

    Attributes:
        outcomes: Every outcome counted (the records' own, then the derived systems').
        first_wrong: Per (variant, category): cases whose first attempt the checker failed,
            of the systems that can correct themselves.
        first_wrong_salvaged: Of those, the cases that ended correct.
        records: Records read (derived ones not included).
        seconds: Their runs' wall time, summed.
    """

    outcomes: list[Outcome] = field(default_factory=list)
    first_wrong: dict[tuple[str, str], int] = field(default_factory=dict)
    first_wrong_salvaged: dict[tuple[str, str], int] = field(default_factory=dict)
    records: int = 0
    seconds: float = 0.0


def _system(variant: str) -> str:
    return variant.rsplit("@", 1)[0]


def _answer(record: Mapping[str, Any]) -> tuple[bool, list[dict[str, Any]], str, list[Any]]:
    """A record's answer: (ok, calls, the first reply's text, its calls)."""
    from bfcl_data import calls_of

    if "run" in record:
        run = record["run"]
        replies = run.get("replies") or [{}]
        ok = run.get("failure") is None
        output, first = run.get("output"), replies[0]
        return ok, calls_of(output) if ok else [], first.get("text", ""), first.get("tool_calls")
    step = record["step"]
    ok = step.get("failure") is None
    turns = step["turns"] or [{}]
    first = turns[0]
    return (ok, calls_of(step.get("output")) if ok else [], first.get("reply", ""),
            first.get("tool_calls") or [])  # fmt: skip


def _derived(outcome: Outcome, variant: str, correct: bool) -> Outcome:
    return dataclasses.replace(outcome, variant=variant, correct=correct)


def graded(records: Iterable[Mapping[str, Any]], cases: Mapping[str, Case[Any]]) -> Graded:
    """Grade ``records`` into outcomes, the derived systems' included.

    ``cases``: the cases as they are now, by name; the records of others are left out.
    """
    result = Graded()
    native_name, listed_name = CHOOSE_PARTS
    parts: dict[tuple[str, str], dict[str, tuple[Mapping[str, Any], Outcome]]] = {}
    for record in records:
        case = cases.get(record["case"])
        if case is None or case.digest != record["case_digest"]:
            continue  # an edited or removed case: its old record is left out
        outcome = Outcome.from_record(record)
        result.outcomes.append(outcome)
        result.records += 1
        result.seconds += outcome.duration_s
        system, setup = outcome.variant.rsplit("@", 1)
        ok, calls, text, first_calls = _answer(record)
        if system in ("raw", "raw-prompted"):
            lenient = calls or calls_in_text(text, function_names(case))
            result.outcomes.append(_derived(outcome, f"{system}-lenient@{setup}",
                                            ok and grade(case, lenient)[0]))  # fmt: skip
        if system in _CORRECTING:
            first = first_attempt(text, first_calls, function_names(case))
            if not grade(case, first)[0]:
                key = (outcome.variant, category(case))
                result.first_wrong[key] = result.first_wrong.get(key, 0) + 1
                result.first_wrong_salvaged[key] = (
                    result.first_wrong_salvaged.get(key, 0) + outcome.correct
                )
        if system in CHOOSE_PARTS:
            parts.setdefault((setup, case.name), {})[system] = (record, outcome)
    for (setup, name), both in parts.items():
        if len(both) < 2:
            continue
        (native, native_outcome), (listed, listed_outcome) = both[native_name], both[listed_name]
        native_ok, native_calls, _, _ = _answer(native)
        _, listed_calls, _, _ = _answer(listed)
        chosen = chosen_calls(native_calls, listed_calls)
        result.outcomes.append(dataclasses.replace(
            native_outcome,
            variant=f"{CHOSEN}@{setup}",
            correct=native_ok and grade(cases[name], chosen)[0],
            corrected=False, correction_turns=0, repeated_corrections=0,
            calls=native_outcome.calls + listed_outcome.calls,
            input_tokens=native_outcome.input_tokens + listed_outcome.input_tokens,
            output_tokens=native_outcome.output_tokens + listed_outcome.output_tokens,
            duration_s=0.0,  # the parts' records count the time
        ))  # fmt: skip
    return result


@dataclass(frozen=True)
class Row:
    """One (system, category) cell of the report.

    The evals report's result of it, and BFCL's first-attempt salvage.
    """

    category: str
    result: VariantResult
    first_wrong: int | None = None
    first_wrong_salvaged: int = 0

    @property
    def system(self) -> str:
        """``system@set-up``."""
        return self.result.variant


def rows_from(graded_records: Graded) -> list[Row]:
    """One row per (category, system@set-up), by category then system."""
    report = Report("bfcl", graded_records.outcomes)
    rows = []
    for name in sorted(report.tags()):
        for result in report.tagged(name).variants:
            key = (result.variant, name)
            corrects = _system(result.variant) in _CORRECTING
            rows.append(Row(name, result,
                            graded_records.first_wrong.get(key, 0) if corrects else None,
                            graded_records.first_wrong_salvaged.get(key, 0)))  # fmt: skip
    return sorted(rows, key=lambda row: (row.category, row.system))


HEAD_TO_HEAD: tuple[str, ...] = (
    "raw-lenient@template",
    "raw-prompted-lenient@template",
    "subagent-prompted-r1@template",
    "subagent-r1@template",
    "subagent-choose-r1@template",
)
"""The systems compared case for case (the same model and server; the peers, run on the
other set-up and on fewer cases, stay in the full table)."""

AGAINST_PEERS: tuple[str, ...] = (
    "raw@tools",
    "pydantic-ai@tools",
    "openai-agents@tools",
    "openai-agents-auto@tools",
    "raw-lenient@template",
    "subagent-prompted-r1@template",
    "subagent-choose-r1@template",
)
"""The peers on the set-up where they can call at all, against subagent's best on its own,
case for case (on the cases the peers ran)."""


def head_to_head(
    outcomes: Iterable[Outcome], systems: Sequence[str] = HEAD_TO_HEAD
) -> dict[str, tuple[int, dict[str, int]]]:
    """Per category: the cases every one of ``systems`` ran, and each system's correct ones.

    Samples are prefixes of one fixed order (``bfcl_data``), so the common cases are the
    first ``min(n)`` of the category: the comparison is paired, case for case.
    """
    right: dict[tuple[str, str], dict[str, bool]] = {}
    for outcome in outcomes:
        if outcome.variant in systems:
            right.setdefault((outcome.variant, outcome.tags[0]), {})[outcome.case] = outcome.correct
    table: dict[str, tuple[int, dict[str, int]]] = {}
    for name in sorted({name for _, name in right}):
        graded_by = [right.get((system, name), {}) for system in systems]
        common = set.intersection(*(set(g) for g in graded_by))
        table[name] = (len(common), {
            system: sum(g[i] for i in common) for system, g in zip(systems, graded_by, strict=True)
        })  # fmt: skip
    return table


def render_head_to_head(
    table: Mapping[str, tuple[int, Mapping[str, int]]], systems: Sequence[str] = HEAD_TO_HEAD
) -> str:
    """The paired comparison as Markdown, with a line for all categories together."""
    names = [f"`{name.removesuffix('@template')}`" for name in systems]
    lines = ["| category | cases | " + " | ".join(names) + " |",
             "| --- | --- |" + " --- |" * len(systems)]  # fmt: skip
    totals = dict.fromkeys(systems, 0)
    count = 0
    for name, (n, correct) in table.items():
        count += n
        cells = []
        for system in systems:
            totals[system] += correct[system]
            cells.append(f"{correct[system] / n:.0%}" if n else "n/a")
        lines.append(f"| {name} | {n} | " + " | ".join(cells) + " |")
    if count:
        cells = [f"**{totals[s] / count:.0%}** ({totals[s]}/{count})" for s in systems]
        lines.append(f"| all | {count} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _share(part: int, whole: int | None) -> str:
    return "n/a" if whole is None else (f"{part}/{whole}" if whole else "-")


def _fmt(row: Row) -> str:
    r = row.result
    low, high = r.success_interval
    tokens = r.prompt_tokens + r.completion_tokens
    per_correct = f"{tokens / r.correct:,.0f}" if r.correct else "n/a"
    salvage = "n/a" if row.first_wrong is None else (
        f"{row.first_wrong_salvaged}/{row.first_wrong}" if row.first_wrong else "n/a"
    )  # fmt: skip
    return (
        f"| {row.category} | `{r.variant}` | {r.correct}/{r.runs} | "
        f"{r.success_rate:.0%} ({low:.0%}-{high:.0%}) | {r.calls_per_case:.2f} | "
        f"{r.prompt_tokens / r.runs:,.0f} | {per_correct} | {salvage} | "
        f"{_share(r.salvaged, r.corrected)} | "
        f"{_share(r.repeated_corrections, r.correction_turns)} |"
    )


def render_irrelevance(rows: Sequence[Row]) -> str:
    """On irrelevance: correct answers (no call) apart from calls and from failed runs."""
    lines = [
        "| system@set-up | cases | answered with no call (correct) | called a function | "
        "no call because the run failed |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        if row.category != "irrelevance":
            continue
        r = row.result
        failed = r.runs - r.valid
        lines.append(f"| `{r.variant}` | {r.runs} | {r.correct} | {r.valid - r.correct} | "
                     f"{failed} |")  # fmt: skip
    return "\n".join(lines)


def render(
    rows: Sequence[Row], meta: Mapping[str, Any] | None, records: int = 0, seconds: float = 0.0
) -> str:
    """The report's Markdown (``records`` records whose runs took ``seconds`` in all)."""
    lines = []
    if meta:
        lines.append(
            f"- Model: `{meta['file']}`, SHA-256 `{meta['sha256']}`; llama-cpp-python "
            f"{meta['llama_cpp_python']}; bfcl-eval {meta['bfcl_eval']} (checker: "
            f"`bfcl_eval.eval_checker.ast_eval.ast_checker.ast_checker`); subagent "
            f"{meta['subagent']}; last run {meta['date']}; {records} cases recorded, "
            f"{seconds / 3600:.1f} h of runs in all (each case's wall time, summed)."
        )
        lines.append("")
    lines.append(
        "| category | system@set-up | correct | accuracy (95% CI) | LLM calls / case | "
        "prompt tokens / case | tokens / correct | salvaged | corrected, then right | "
        "repeated corrections |"
    )
    lines.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    lines += [_fmt(row) for row in rows]
    return "\n".join(lines)


def _plot(rows: Sequence[Row], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    categories = sorted({r.category for r in rows})
    systems = sorted({r.system for r in rows})
    by = {(r.system, r.category): r.result for r in rows}
    width = 0.8 / max(1, len(systems))
    figure, axes = plt.subplots(figsize=(11, 4.5))
    for index, system in enumerate(systems):
        values = [by[(system, c)].success_rate if (system, c) in by else 0 for c in categories]
        positions = [i + index * width for i in range(len(categories))]
        axes.bar(positions, values, width, label=system, color=plt.cm.tab20(index % 20))
    axes.set_xticks([i + 0.4 - width / 2 for i in range(len(categories))], categories)
    axes.set_ylabel("accuracy (BFCL checker)")
    axes.set_ylim(0, 1)
    axes.legend(fontsize=7, ncol=3)
    axes.set_title("BFCL single-turn sample, Qwen2.5-Coder 0.5B on the local server")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=90)
    plt.close(figure)


def _cases(names: Iterable[str]) -> dict[str, Case[Any]]:
    return {case.name: case for name in names for case in load_cases(name, None)}


def read(results: Path = RESULTS) -> Graded:
    """Every record under ``results``, graded.

    Raises:
        SystemExit: ``results`` holds records in the format before ``subagent.evals`` (the
            message says how to convert them).
    """
    from convert_records import refuse_old

    refuse_old(results)
    records = [r for path in sorted(results.glob("*.jsonl")) for r in read_records(path)]
    categories = {tag for r in records for tag in r.get("tags", [])[:1]}
    return graded(records, _cases(categories))


def section(results: Path = RESULTS) -> tuple[str, list[Row]]:
    """The page's BFCL part from the records under ``results``, and its rows."""
    graded_records = read(results)
    rows = rows_from(graded_records)
    meta_path = results / "meta.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else None
    text = render(rows, meta, graded_records.records, graded_records.seconds)
    if any(row.category == "irrelevance" for row in rows):
        text += (
            "\n\nOn `irrelevance`, the answers apart from the failures: a failed run is no "
            "answer, so it is not \"no call\" (a raw call's or a peer's failure is an "
            "exception it raised, a subagent run's its failure reason):\n\n"
            + render_irrelevance(rows)
        )
    present = {row.system for row in rows}
    for names, heading in (
        (HEAD_TO_HEAD, "Case for case: the accuracy of each system on the cases all of them "
                       "ran (the first cases of each category's fixed order), so the columns "
                       "compare the same questions."),
        (AGAINST_PEERS, "Against the peers on the set-up where they can call, case for case "
                        "(on the cases the peers ran; that set-up never showed them the "
                        'functions, see "The peers" below):'),
    ):  # fmt: skip
        systems = [name for name in names if name in present]
        if names is AGAINST_PEERS and not any(
            name.endswith("@tools") and not name.startswith("raw") for name in systems
        ):
            continue  # no peer ran
        paired = head_to_head(graded_records.outcomes, systems) if len(systems) > 1 else {}
        if paired:
            text += f"\n\n{heading}\n\n" + render_head_to_head(paired, systems)
    return text, rows


def update_page(content: str, text: str) -> str:
    """``content`` with the part between the BFCL markers replaced by ``text``.

    Raises:
        ValueError: The page lacks the markers.
    """
    if START not in content or END not in content:
        raise ValueError("the page lacks the bfcl-report markers")
    head, rest = content.split(START, 1)
    tail = rest.split(END, 1)[1]
    return f"{head}{START}\n{text}\n{END}{tail}"


def write_report(results: Path = RESULTS, page: Path = PAGE, plot: Path | None = PLOT) -> str:
    """Grade every record under ``results`` and write the page's BFCL part (and the plot)."""
    text, rows = section(results)
    page.write_text(update_page(page.read_text(encoding="utf-8"), text), encoding="utf-8")
    if plot is not None and rows:
        _plot(rows, plot)
    return text


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument(
        "--print-only", action="store_true", help="print the tables; write neither page nor plot"
    )
    args = parser.parse_args(argv)
    if args.print_only:
        print(section(args.results)[0])
        return
    print(write_report(args.results, plot=None if args.no_plot else PLOT))


if __name__ == "__main__":
    main()
