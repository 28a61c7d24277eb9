"""`make eval-report`: the evaluation's table and plot, from the stored records alone.

    python eval/eval_report.py [--check] [--evals] [--results eval/results]

Reads each model's records (``eval/results/<model>/<group>.jsonl``, written by
``subagent.evals``: see ``run_eval.py``) through ``subagent.evals.Report`` and the
provenance beside them (``meta.json``), and writes the table into ``docs/evaluation.md``
(between its ``eval-report`` markers) and the plot to ``docs/images/evaluation.png``
(matplotlib: the ``eval`` extra). Every figure is the evals report's (success with its
Wilson interval, correction salvage, repeated corrections, calls, tokens, wall-time
percentiles, stop reasons, failures); this module only lays the groups of each model out
as one table, a row per configuration. Records of tasks changed or removed since they ran
are left out. ``--check`` writes nothing and exits 1 when the page's table differs from
what the records give; ``--evals`` prints each group's own evals report instead (what
``subagent eval report FILE`` prints, with its recommendation).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from configs import GROUPS  # noqa: E402
from run_eval import MODELS, RESULTS_DIR, records_path  # noqa: E402
from tasks import load_tasks  # noqa: E402

from subagent.evals import Case, Report, VariantResult  # noqa: E402

__all__ = ["Row", "render_section", "render_table", "reports", "rows_of", "update_page"]

PAGE = ROOT / "docs" / "evaluation.md"
PLOT = ROOT / "docs" / "images" / "evaluation.png"
START = "<!-- eval-report:start (make eval-report writes this part) -->"
END = "<!-- eval-report:end -->"
MODEL_TITLES = {
    "smollm2": "SmolLM2 135M",
    "qwen": "Qwen2.5-Coder 0.5B",
    "qwen1.5b": "Qwen2.5-Coder 1.5B",
}
MODEL_COLOURS = {"smollm2": "tab:blue", "qwen": "tab:green", "qwen1.5b": "tab:red"}


@dataclass(frozen=True)
class Row:
    """What one configuration came to on one model: the evals report's result of it."""

    model: str
    result: VariantResult

    @property
    def config(self) -> str:
        """The configuration's name."""
        return self.result.variant


def reports(
    results: Path = RESULTS_DIR, cases: Sequence[Case[Any]] | None = None
) -> dict[str, dict[str, Report]]:
    """Per model with records (known models first), per group: the evals report.

    ``cases``: the tasks as they are now (default: ``tasks.jsonl``'s).
    """
    from convert_records import refuse_old

    if results.exists():
        refuse_old(results)
    tasks = list(load_tasks().cases if cases is None else cases)
    found = sorted(
        (path for path in results.iterdir() if path.is_dir() and (path / "meta.json").exists()),
        key=lambda path: (MODELS.index(path.name) if path.name in MODELS else len(MODELS), path),
    ) if results.exists() else []  # fmt: skip
    by_model: dict[str, dict[str, Report]] = {}
    for folder in found:
        for group in GROUPS:
            path = records_path(results, folder.name, group.name)
            if path.exists():
                report = Report.read(path, cases=group.cases(tasks))
                by_model.setdefault(folder.name, {})[group.name] = report
    return by_model


def rows_of(by_model: dict[str, dict[str, Report]]) -> list[Row]:
    """One row per model and configuration with records, in the configurations' order."""
    return [
        Row(model, result)
        for model, groups in by_model.items()
        for report in groups.values()
        for result in report.variants
        if result.runs
    ]


def _counts(counts: dict[str, int]) -> str:
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return ", ".join(f"{name} {count}" for name, count in ordered)


def _share(part: int, whole: int) -> str:
    return f"{part}/{whole}" if whole else "-"


def render_table(rows: Sequence[Row]) -> str:
    """The Markdown table of ``rows``."""
    lines = [
        "| model | configuration | runs | valid | correct | success (95% CI) | salvaged | "
        "repeated corrections | mean calls | mean prompt tokens | tokens per success | "
        "p50 / p95 s | stop reasons | failures |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        r = row.result
        low, high = r.success_interval
        tokens = r.prompt_tokens + r.completion_tokens
        per_success = f"{tokens / r.correct:,.0f}" if r.correct else "n/a"
        lines.append(
            f"| {MODEL_TITLES.get(row.model, row.model)} | `{r.variant}` | {r.runs} | "
            f"{r.valid} | {r.correct} | {r.success_rate:.0%} ({low:.0%}-{high:.0%}) | "
            f"{_share(r.salvaged, r.corrected)} | "
            f"{_share(r.repeated_corrections, r.correction_turns)} | {r.calls_per_case:.2f} | "
            f"{r.prompt_tokens / r.runs:,.0f} | {per_success} | {r.wall_p50_s:.1f} / "
            f"{r.wall_p95_s:.1f} | {_counts(r.stop_reasons)} | {_counts(r.failed) or '-'} |"
        )
    return "\n".join(lines)


def render_provenance(results: Path, models: Sequence[str]) -> str:
    """One line per model: its file and hash, the versions, the date and the time it took."""
    lines = []
    for model in models:
        meta = json.loads((results / model / "meta.json").read_text())
        lines.append(
            f"- {MODEL_TITLES.get(model, model)}: `{meta['file']}`, SHA-256 `{meta['sha256']}`; "
            f"llama-cpp-python {meta['llama_cpp_python']}, subagent {meta['subagent']}; "
            f"{meta['date']}; {meta['runs']} runs in {meta['seconds'] / 60:.1f} min."
        )
    return "\n".join(lines)


def render_section(results: Path = RESULTS_DIR, cases: Sequence[Case[Any]] | None = None) -> str:
    """What goes between the page's markers: provenance, then the table."""
    by_model = reports(results, cases)
    return f"{render_provenance(results, list(by_model))}\n\n{render_table(rows_of(by_model))}"


def update_page(page: str, section: str) -> str:
    """``page`` with the text between its markers replaced by ``section``.

    Raises:
        ValueError: The page lacks the markers.
    """
    start, end = page.find(START), page.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{PAGE.name} lacks the markers {START!r} ... {END!r}")
    return page[: start + len(START)] + "\n" + section + "\n" + page[end:]


def plot(rows: Sequence[Row], path: Path) -> None:
    """Success (with its 95% interval) and mean calls against the correction budget."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4), dpi=100)
    budgets = [0, 1, 2, 3]
    for model in dict.fromkeys(row.model for row in rows):
        title = MODEL_TITLES.get(model, model)
        colour = MODEL_COLOURS.get(model)
        found = {row.config: row.result for row in rows if row.model == model}
        sweep = [found.get(f"retries-{n}") for n in budgets]
        if not all(sweep):
            continue
        results = [result for result in sweep if result is not None]
        rates = [100 * result.success_rate for result in results]
        errors = [
            [100 * (r.success_rate - r.success_interval[0]) for r in results],
            [100 * (r.success_interval[1] - r.success_rate) for r in results],
        ]
        left.errorbar(budgets, rates, yerr=errors, marker="o", capsize=3, color=colour,
                      label=f"{title}, collapse")  # fmt: skip
        right.plot(budgets, [r.calls_per_case for r in results], marker="o", color=colour,
                   label=title)  # fmt: skip
        accumulated = found.get("accumulate-3")
        if accumulated:
            left.plot([3], [100 * accumulated.success_rate], marker="x", markersize=10,
                      linestyle="none", color=colour, label=f"{title}, accumulate")  # fmt: skip
    left.set(xlabel="return_retries (max_turns=1)", ylabel="valid and correct, % (95% CI)",
             title="Success rate", xticks=budgets, ylim=(0, 100))  # fmt: skip
    right.set(xlabel="return_retries (max_turns=1)", ylabel="LLM calls per run",
              title="Mean calls", xticks=budgets)  # fmt: skip
    for axes, place in ((left, "center right"), (right, "upper left")):
        if axes.get_legend_handles_labels()[0]:
            axes.legend(fontsize=8, loc=place)
        axes.grid(alpha=0.3)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, metadata={"Software": None})
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    parser.add_argument("--evals", action="store_true", help="print each group's evals report")
    parser.add_argument("--results", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    if args.evals:
        for model, groups in reports(args.results).items():
            for group, report in groups.items():
                print(f"# {MODEL_TITLES.get(model, model)}\n")
                print(report.to_markdown().replace(f"## {report.dataset}", f"## {group}", 1))
        return 0
    section = render_section(args.results)
    page = PAGE.read_text(encoding="utf-8")
    updated = update_page(page, section)
    if args.check:
        if updated != page:
            print(f"{PAGE.relative_to(ROOT)} differs from the records: run make eval-report")
            return 1
        print(f"{PAGE.relative_to(ROOT)} matches the records")
        return 0
    PAGE.write_text(updated, encoding="utf-8")
    plot(rows_of(reports(args.results)), PLOT)
    print(f"wrote {PAGE.relative_to(ROOT)} and {PLOT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
