"""`make eval-report`: the evaluation's table and plot, from the stored records alone.

    python eval/eval_report.py [--check]

Reads ``eval/results/*.jsonl`` (one record per run, see ``results_file.py``) and the
provenance next to them, judges every run's output against its task's known answer, and
writes the table into ``docs/evaluation.md`` (between its ``eval-report`` markers) and the
plot to ``docs/images/evaluation.png`` (needs matplotlib: the ``eval`` extra). ``--check``
writes nothing and exits 1 when the page's table differs from what the records give.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic_core import to_jsonable_python

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from configs import CONFIGS  # noqa: E402
from results_file import RESULTS_DIR, Record, read_records  # noqa: E402
from tasks import Task, judge, load_tasks  # noqa: E402

__all__ = ["Row", "render_table", "rows_of", "update_page"]

PAGE = ROOT / "docs" / "evaluation.md"
PLOT = ROOT / "docs" / "images" / "evaluation.png"
START = "<!-- eval-report:start (make eval-report writes this part) -->"
END = "<!-- eval-report:end -->"
MODEL_TITLES = {"smollm2": "SmolLM2 135M", "qwen": "Qwen2.5-Coder 0.5B"}
MODEL_COLOURS = {"smollm2": "tab:blue", "qwen": "tab:green"}


@dataclass
class Row:
    """What one configuration came to on one model."""

    model: str
    config: str
    runs: int = 0
    valid: int = 0
    correct: int = 0
    calls: list[int] = field(default_factory=list)
    prompt_tokens: list[int] = field(default_factory=list)
    tokens: int = 0
    seconds: list[float] = field(default_factory=list)
    stop_reasons: Counter[str] = field(default_factory=Counter)
    failures: Counter[str] = field(default_factory=Counter)

    def add(self, record: Record, task: Task) -> None:
        """Count one run."""
        step = record.step
        self.runs += 1
        self.valid += step.ok
        output = to_jsonable_python(step.output) if step.ok else None
        self.correct += judge(task, output)
        self.calls.append(len(step.turns))
        self.prompt_tokens.append(step.usage.total.input_tokens)
        self.tokens += step.usage.total.total_tokens
        self.seconds.append(step.duration_s)
        self.stop_reasons.update(step.stop_reasons)
        if step.failure is not None:
            self.failures[step.failure.reason.value] += 1

    @property
    def success_rate(self) -> float:
        """Runs whose output was valid and correct, as a fraction of the runs."""
        return self.correct / self.runs if self.runs else 0.0


def rows_of(records: Iterable[Record], tasks: Sequence[Task]) -> list[Row]:
    """One row per (model, configuration) that has records, in the configurations' order.

    A record whose task is no longer in the task file, or whose task changed since it ran
    (another digest), is left out: it no longer measures the task set.
    """
    by_id = {task.id: task for task in tasks}
    rows: dict[tuple[str, str], Row] = {}
    for record in records:
        task = by_id.get(record.task)
        if task is None or task.digest != record.digest:
            continue
        key = (record.model, record.config)
        rows.setdefault(key, Row(record.model, record.config)).add(record, task)
    order = {config.name: index for index, config in enumerate(CONFIGS)}
    models = list(MODEL_TITLES)
    return sorted(rows.values(), key=lambda row: (_index(models, row.model),
                                                  order.get(row.config, len(order))))  # fmt: skip


def _index(items: list[str], item: str) -> int:
    return items.index(item) if item in items else len(items)


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def _counts(counter: Mapping[str, int]) -> str:
    ordered = sorted(counter.items(), key=lambda item: (-item[1], item[0]))
    return ", ".join(f"{name} {count}" for name, count in ordered)


def render_table(rows: Sequence[Row]) -> str:
    """The Markdown table of ``rows``."""
    lines = [
        "| model | configuration | runs | valid | correct | success | mean calls | "
        "mean prompt tokens | tokens per success | p50 / p95 s | stop reasons | failures |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        per_success = f"{row.tokens / row.correct:,.0f}" if row.correct else "n/a"
        lines.append(
            f"| {MODEL_TITLES.get(row.model, row.model)} | `{row.config}` | {row.runs} | "
            f"{row.valid} | {row.correct} | {row.success_rate:.0%} | "
            f"{statistics.fmean(row.calls):.2f} | {statistics.fmean(row.prompt_tokens):,.0f} | "
            f"{per_success} | {_percentile(row.seconds, 0.5):.1f} / "
            f"{_percentile(row.seconds, 0.95):.1f} | {_counts(row.stop_reasons)} | "
            f"{_counts(row.failures) or '-'} |"
        )
    return "\n".join(lines)


def render_provenance(results: Path) -> str:
    """One line per model: its file and hash, the versions, the date and the time it took."""
    lines = []
    for model in MODEL_TITLES:
        path = results / f"{model}.meta.json"
        if not path.exists():
            continue
        meta = json.loads(path.read_text())
        lines.append(
            f"- {MODEL_TITLES[model]}: `{meta['file']}`, SHA-256 `{meta['sha256']}`; "
            f"llama-cpp-python {meta['llama_cpp_python']}, subagent {meta['subagent']}; "
            f"{meta['date']}; {meta['runs']} runs in {meta['seconds'] / 60:.1f} min."
        )
    return "\n".join(lines)


def render_section(results: Path = RESULTS_DIR, tasks: Sequence[Task] | None = None) -> str:
    """What goes between the page's markers: provenance, then the table."""
    records = [record for path in sorted(results.glob("*.jsonl"))
               for record in read_records(path)]  # fmt: skip
    rows = rows_of(records, load_tasks() if tasks is None else tasks)
    return f"{render_provenance(results)}\n\n{render_table(rows)}"


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
    """Success rate and mean calls against the correction budget, per model (matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4), dpi=100)
    budgets = [0, 1, 2, 3]
    for model, title in MODEL_TITLES.items():
        colour = MODEL_COLOURS[model]
        found = {row.config: row for row in rows if row.model == model}
        sweep = [found.get(f"retries-{n}") for n in budgets]
        if not all(sweep):
            continue
        rates = [100 * row.success_rate for row in sweep if row]
        calls = [statistics.fmean(row.calls) for row in sweep if row]
        left.plot(budgets, rates, marker="o", color=colour, label=f"{title}, collapse")
        right.plot(budgets, calls, marker="o", color=colour, label=title)
        accumulated = found.get("accumulate-3")
        if accumulated:
            left.plot([3], [100 * accumulated.success_rate], marker="x", markersize=10,
                      linestyle="none", color=colour, label=f"{title}, accumulate")  # fmt: skip
    left.set(xlabel="return_retries (max_turns=1)", ylabel="valid and correct, %",
             title="Success rate", xticks=budgets, ylim=(0, 100))  # fmt: skip
    right.set(xlabel="return_retries (max_turns=1)", ylabel="LLM calls per run",
              title="Mean calls", xticks=budgets)  # fmt: skip
    for axes in (left, right):
        if axes.get_legend_handles_labels()[0]:
            axes.legend(fontsize=8)
        axes.grid(alpha=0.3)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, metadata={"Software": None})
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    args = parser.parse_args(argv)
    section = render_section()
    page = PAGE.read_text(encoding="utf-8")
    updated = update_page(page, section)
    if args.check:
        if updated != page:
            print(f"{PAGE.relative_to(ROOT)} differs from the records: run make eval-report")
            return 1
        print(f"{PAGE.relative_to(ROOT)} matches the records")
        return 0
    PAGE.write_text(updated, encoding="utf-8")
    records = [record for path in sorted(RESULTS_DIR.glob("*.jsonl"))
               for record in read_records(path)]  # fmt: skip
    plot(rows_of(records, load_tasks()), PLOT)
    print(f"wrote {PAGE.relative_to(ROOT)} and {PLOT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
