"""`make eval-report` (BFCL part): the records of ``eval/results/bfcl/`` graded and tabled.

Every recorded outcome is graded again with BFCL's checker (``bfcl_data.grade``), so the
report needs no model. Per category and system: accuracy with a 95% Wilson interval, mean
LLM calls and prompt tokens per case, tokens (prompt and completion) per correct case, and
the salvage rate: of the cases whose first attempt was wrong, the share that ended correct.
``raw-lenient`` is graded from the ``raw`` records: the same replies, their text read as a
JSON call when the server returned no native call. ``subagent-choose-r1`` is graded from the
records of its two parts (``bfcl_systems.CHOOSE_PARTS``) on the cases both ran: the answer
``bfcl_systems.chosen_calls`` picks, at the cost of both runs.

Writes the part of ``docs/evaluation.md`` between the ``bfcl-report`` markers, and
``docs/images/bfcl.png``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bfcl_data import Case, function_names, grade, load_cases  # noqa: E402
from bfcl_systems import CHOOSE_PARTS, calls_in_text, chosen_calls  # noqa: E402
from run_bfcl import RESULTS, read_lines  # noqa: E402

__all__ = [
    "AGAINST_PEERS",
    "HEAD_TO_HEAD",
    "PAGE",
    "Row",
    "chosen_records",
    "head_to_head",
    "render",
    "render_head_to_head",
    "rows_from",
    "section",
    "update_page",
    "wilson",
    "write_report",
]

PAGE = ROOT / "docs" / "evaluation.md"
PLOT = ROOT / "docs" / "images" / "bfcl.png"
START = "<!-- bfcl-report:start (make eval-report writes this part) -->"
END = "<!-- bfcl-report:end -->"


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson score interval of a proportion, as (low, high)."""
    if n == 0:
        return (0.0, 0.0)
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return (max(0.0, centre - half), min(1.0, centre + half))


@dataclass
class Row:
    """One (system, category) cell of the report."""

    system: str
    category: str
    n: int = 0
    correct: int = 0
    llm_calls: int = 0
    prompt_tokens: int = 0
    tokens: int = 0
    first_wrong: int = 0
    salvaged: int = 0
    corrected: int = 0
    corrected_right: int = 0
    repeats: int = 0
    corrections: int = 0
    errors: dict[str, int] = field(default_factory=dict)

    @property
    def accuracy(self) -> float:
        """Correct cases over cases."""
        return self.correct / self.n if self.n else 0.0


def _cases_by_key(categories: Iterable[str]) -> dict[tuple[str, str], Case]:
    cases: dict[tuple[str, str], Case] = {}
    for category in categories:
        for case in load_cases(category, None):
            cases[(category, case.id)] = case
    return cases


def _lenient(outcome: Mapping[str, Any], case: Case) -> list[dict[str, Any]]:
    if outcome["calls"]:
        return list(outcome["calls"])
    return calls_in_text(outcome.get("text") or "", function_names(case))


def _verbatim_repeats(turns: Sequence[Mapping[str, Any]]) -> tuple[int, int]:
    """(correction turns that repeat the previous reply verbatim, correction turns)."""
    later = list(itertools.pairwise(turns))
    return sum(1 for a, b in later if a.get("text") and a.get("text") == b.get("text")), len(later)


CHOSEN = "subagent-choose-r1"


def chosen_records(records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``subagent-choose-r1``'s records, made from its two parts' records of the same cases.

    Its calls are :func:`bfcl_systems.chosen_calls` of the parts' calls; its cost (LLM
    calls, tokens, time) is both runs'. It keeps no turns and no first attempt: each part's
    own row counts those.
    """
    native_name, listed_name = CHOOSE_PARTS
    by_system: dict[str, dict[tuple[str, str, str, str], Mapping[str, Any]]] = {}
    for record in records:
        key = (record["setup"], record["category"], record["id"], record["digest"])
        by_system.setdefault(record["system"], {})[key] = record
    listed_records = by_system.get(listed_name, {})
    chosen = []
    for key, native in by_system.get(native_name, {}).items():
        listed = listed_records.get(key)
        if listed is None:
            continue
        a, b = native["outcome"], listed["outcome"]
        outcome = {
            "calls": chosen_calls(a["calls"], b["calls"]),
            "first_calls": None,
            "text": "",
            "turns": [],
            "error": None,
            **{k: a[k] + b[k] for k in ("llm_calls", "prompt_tokens", "completion_tokens")},
            "seconds": 0.0,  # the parts' records count the time
        }
        chosen.append({**native, "system": CHOSEN, "outcome": outcome})
    return chosen


def rows_from(records: Iterable[Mapping[str, Any]]) -> list[Row]:
    """Grade ``records`` into one row per (system@setup, category), raw-lenient included.

    Derived systems (``subagent-choose-r1``) are graded when their records are among
    ``records`` (:func:`section` adds them once, from :func:`chosen_records`).
    """
    records = list(records)
    cases = _cases_by_key({r["category"] for r in records})
    rows: dict[tuple[str, str], Row] = {}
    for record in records:
        case = cases.get((record["category"], record["id"]))
        if case is None or case.digest != record["digest"]:
            continue  # an edited or removed case: its old record is left out
        outcome = record["outcome"]
        for name, calls in _graded_calls(record, case):
            row = rows.setdefault((name, case.category), Row(name, case.category))
            ok, _ = grade(case, calls)
            row.n += 1
            row.correct += ok
            row.llm_calls += outcome["llm_calls"]
            row.prompt_tokens += outcome["prompt_tokens"]
            row.tokens += outcome["prompt_tokens"] + outcome["completion_tokens"]
            if outcome.get("error"):
                kind = outcome["error"].split(":", 1)[0]
                row.errors[kind] = row.errors.get(kind, 0) + 1
            first = outcome.get("first_calls")
            if first is not None:  # a system that may correct itself
                first_ok, _ = grade(case, first)
                if not first_ok:
                    row.first_wrong += 1
                    row.salvaged += ok
                if outcome["llm_calls"] > 1:  # the first answer was invalid: corrections ran
                    row.corrected += 1
                    row.corrected_right += ok
            repeats, corrections = _verbatim_repeats(outcome.get("turns") or [])
            row.repeats += repeats
            row.corrections += corrections
    return sorted(rows.values(), key=lambda r: (r.category, r.system))


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


def _graded_calls(record: Mapping[str, Any], case: Case) -> list[tuple[str, list[Any]]]:
    """(system@setup, calls) of one record: raw records are also read leniently."""
    outcome = record["outcome"]
    variants = [(f"{record['system']}@{record['setup']}", outcome["calls"])]
    if record["system"] in ("raw", "raw-prompted"):
        lenient = f"{record['system']}-lenient@{record['setup']}"
        variants.append((lenient, _lenient(outcome, case)))
    return variants


def head_to_head(
    records: Iterable[Mapping[str, Any]], systems: Sequence[str] = HEAD_TO_HEAD
) -> dict[str, tuple[int, dict[str, int]]]:
    """Per category: the cases every one of ``systems`` ran, and each system's correct ones.

    Samples are prefixes of one fixed order (``bfcl_data``), so the common cases are the
    first ``min(n)`` of the category: the comparison is paired, case for case.
    """
    records = list(records)
    cases = _cases_by_key({r["category"] for r in records})
    right: dict[tuple[str, str], dict[str, bool]] = {}
    for record in records:
        case = cases.get((record["category"], record["id"]))
        if case is None or case.digest != record["digest"]:
            continue
        for name, calls in _graded_calls(record, case):
            if name in systems:
                right.setdefault((name, case.category), {})[case.id] = grade(case, calls)[0]
    table: dict[str, tuple[int, dict[str, int]]] = {}
    for category in sorted({category for _, category in right}):
        graded = [right.get((name, category), {}) for name in systems]
        common = set.intersection(*(set(g) for g in graded))
        table[category] = (len(common), {
            name: sum(g[i] for i in common) for name, g in zip(systems, graded, strict=True)
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
    for category, (n, correct) in table.items():
        count += n
        cells = []
        for name in systems:
            totals[name] += correct[name]
            cells.append(f"{correct[name] / n:.0%}" if n else "n/a")
        lines.append(f"| {category} | {n} | " + " | ".join(cells) + " |")
    if count:
        cells = [f"**{totals[name] / count:.0%}** ({totals[name]}/{count})" for name in systems]
        lines.append(f"| all | {count} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _fmt(row: Row) -> str:
    low, high = wilson(row.correct, row.n)
    per_correct = f"{row.tokens / row.correct:,.0f}" if row.correct else "n/a"
    salvage = f"{row.salvaged}/{row.first_wrong}" if row.first_wrong else "n/a"
    corrected = f"{row.corrected_right}/{row.corrected}" if row.corrected else "-"
    repeats = f"{row.repeats}/{row.corrections}" if row.corrections else "-"
    return (
        f"| {row.category} | `{row.system}` | {row.correct}/{row.n} | "
        f"{row.accuracy:.0%} ({low:.0%}-{high:.0%}) | {row.llm_calls / row.n:.2f} | "
        f"{row.prompt_tokens / row.n:,.0f} | {per_correct} | {salvage} | {corrected} | {repeats} |"
    )


def render(
    rows: Sequence[Row], meta: Mapping[str, Any] | None, cases: int = 0, seconds: float = 0.0
) -> str:
    """The report's Markdown (``cases`` records whose runs took ``seconds`` in all)."""
    lines = []
    if meta:
        lines.append(
            f"- Model: `{meta['file']}`, SHA-256 `{meta['sha256']}`; llama-cpp-python "
            f"{meta['llama_cpp_python']}; bfcl-eval {meta['bfcl_eval']} (checker: "
            f"`bfcl_eval.eval_checker.ast_eval.ast_checker.ast_checker`); subagent "
            f"{meta['subagent']}; last run {meta['date']}; {cases} cases recorded, "
            f"{seconds / 3600:.1f} h of runs in all (each case's wall time, summed)."
        )
        lines.append("")
    lines.append(
        "| category | system@set-up | correct | accuracy (95% CI) | LLM calls / case | "
        "prompt tokens / case | tokens / correct | salvaged | corrected, then right | "
        "verbatim repeats |"
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
    by = {(r.system, r.category): r for r in rows}
    width = 0.8 / max(1, len(systems))
    figure, axes = plt.subplots(figsize=(11, 4.5))
    for index, system in enumerate(systems):
        values = [by[(system, c)].accuracy if (system, c) in by else 0 for c in categories]
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


def section(results: Path = RESULTS) -> tuple[str, list[Row]]:
    """The page's BFCL part from the records under ``results``, and its rows."""
    records = [r for path in sorted(results.glob("*.jsonl")) for r in read_lines(path)]
    seconds = sum(float(r["outcome"].get("seconds") or 0.0) for r in records)
    recorded = len(records)
    records += chosen_records(records)
    rows = rows_from(records)
    meta_path = results / "meta.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else None
    text = render(rows, meta, recorded, seconds)
    present = {row.system for row in rows}
    for names, heading in (
        (HEAD_TO_HEAD, "Case for case: the accuracy of each system on the cases all of them "
                       "ran (the first cases of each category's fixed order), so the columns "
                       "compare the same questions."),
        (AGAINST_PEERS, "Against the peers on the set-up where they can call, case for case "
                        "(on the cases the peers ran):"),
    ):  # fmt: skip
        systems = [name for name in names if name in present]
        if names is AGAINST_PEERS and not any(name.endswith("@tools") for name in systems):
            continue  # no peer ran
        paired = head_to_head(records, systems) if len(systems) > 1 else {}
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
