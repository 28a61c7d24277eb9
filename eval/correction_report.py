"""The correction study's table and plot, from its records alone.

    python eval/correction_report.py [--page] [--plot docs/images/corrections.png]

Reads ``eval/results/corrections/<model>/tasks.jsonl`` (``eval/correction_study.py``) and,
where they exist, ``structured-final.jsonl`` and ``fail-refused.jsonl``
(``eval/fail_refused_probe.py``) with the ``subagent.evals`` report, and prints one row per
model and correction setting: success at ``return_retries`` 0, 1 and 2 with Wilson 95%
intervals, correction salvage and repeats at 1, calls, prompt tokens and wall seconds per
case at 1. Then the BFCL rows, the 1.5B's headline rows on every case they all ran, and
the peers on the ``parsed`` set-up. ``--page`` writes each table between its markers in
``docs/evaluation.md`` instead of printing them. The plot shows success at
``return_retries=1`` against prompt tokens per case.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from subagent._stats import mcnemar
from subagent.evals import Outcome, Report
from subagent.evals._report import VariantResult

sys.path.insert(0, str(Path(__file__).resolve().parent))

RESULTS = Path(__file__).resolve().parent / "results" / "corrections"
MODELS = {"qwen": "Qwen2.5-Coder 0.5B", "qwen1.5b": "Qwen2.5-Coder 1.5B"}
SETTINGS = ("same", "quote", "sampled", "structured", "tool", "escalated", "escalated-structured")


def _rate(result: VariantResult) -> str:
    low, high = result.success_interval
    return f"{result.success_rate:.0%} ({low:.0%}-{high:.0%})"


def _share(part: int, whole: int) -> str:
    return f"{part}/{whole}" if whole else "-"


def rows(model: str) -> list[tuple[str, VariantResult, VariantResult, VariantResult]]:
    """(setting, r0, r1, r2) for each setting the model's records hold."""
    report = Report.read(RESULTS / model / "tasks.jsonl")
    names = {result.variant for result in report.variants}
    out = []
    for setting in SETTINGS:
        if f"{setting}-r1" in names:
            r0, r1, r2 = (report.variant(f"{setting}-r{budget}") for budget in (0, 1, 2))
            out.append((setting, r0, r1, r2))
    return out


def table() -> str:
    """The study's table in Markdown."""
    lines = [
        "| model | correction turns | success r0 | success r1 | success r2 | salvaged (r1) "
        "| repeated (r1) | calls/case (r1) | prompt tokens/case (r1) | wall s/case (r1) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for model, label in MODELS.items():
        if not (RESULTS / model / "tasks.jsonl").exists():
            continue
        for setting, r0, r1, r2 in rows(model):
            lines.append(
                f"| {label} | {setting} | {_rate(r0)} | {_rate(r1)} | {_rate(r2)} "
                f"| {_share(r1.salvaged, r1.corrected)} "
                f"| {_share(r1.repeated_corrections, r1.correction_turns)} "
                f"| {r1.calls_per_case:.2f} | {r1.prompt_tokens / max(r1.runs, 1):,.0f} "
                f"| {r1.wall_per_case_s:.1f} |"
            )
        for extra in ("structured-final", "fail-refused", "defaults"):
            path = RESULTS / model / f"{extra}.jsonl"
            if path.exists() and path.stat().st_size:
                for result in Report.read(path).variants:
                    lines.append(
                        f"| {label} | {result.variant} ({result.runs} cases) | - "
                        f"| {_rate(result)} | - | {_share(result.salvaged, result.corrected)} "
                        f"| {_share(result.repeated_corrections, result.correction_turns)} "
                        f"| {result.calls_per_case:.2f} "
                        f"| {result.prompt_tokens / max(result.runs, 1):,.0f} "
                        f"| {result.wall_per_case_s:.1f} |"
                    )
    return "\n".join(lines)


BFCL_ROWS = (
    ("bfcl-contract", "same-r0", "free text, no correction"),
    ("bfcl-contract", "same-r1", "free text, one correction as text"),
    ("bfcl-contract", "structured-r1", "free text, one correction under the schema"),
    ("bfcl-structured", "structured-final", "final turn under the output's schema (any calls)"),
    ("bfcl-structured", "structured-final-exact", "final turn under this request's calls"),
)
"""The BFCL rows: (records file, variant, what it sends)."""


BASELINES = (
    ("raw-prompted-lenient@template", "baseline: a raw call, the calls prompt, its text read"),
    ("subagent-prompted-r1@template", "baseline: `subagent-prompted-r1` (native tools)"),
)
"""The rows of the model's BFCL baseline (``eval/results/bfcl-<model>``), when recorded."""

BASELINE_DIRS = {"qwen": "bfcl", "qwen1.5b": "bfcl-qwen1.5b"}


def _baseline_outcomes(model: str) -> dict[str, list[Any]]:
    """The baseline systems' graded outcomes (BFCL's checker, derived rows included)."""
    folder = RESULTS.parent / BASELINE_DIRS.get(model, f"bfcl-{model}")
    if not folder.exists():
        return {}
    outcomes = _graded(folder)
    return {variant: [o for o in outcomes if o.variant == variant]
            for variant, _ in BASELINES}  # fmt: skip


@functools.cache  # the table and the plot read the same records
def bfcl_reports(model: str) -> dict[str, Report] | None:
    """Each BFCL row's report, on the cases every row holds (a paired sample), or ``None``.

    The baseline's rows come first, where the model has one recorded.
    """
    folder = RESULTS / model
    files = {name: folder / f"{name}.jsonl" for name, _, _ in BFCL_ROWS}
    if not all(path.exists() and path.stat().st_size for path in files.values()):
        return None
    read = {name: Report.read(path) for name, path in files.items()}
    chosen = _baseline_outcomes(model)
    chosen.update({variant: [o for o in read[name].outcomes if o.variant == variant]
                   for name, variant, _ in BFCL_ROWS})  # fmt: skip
    common = set.intersection(*({o.case for o in outcomes} for outcomes in chosen.values()))
    return {variant: Report("bfcl", [o for o in outcomes if o.case in common])
            for variant, outcomes in chosen.items()}  # fmt: skip


def _categories(report: Report) -> list[str]:
    """The report's BFCL categories in BFCL's own order (the page's column order)."""
    from bfcl_data import DEFAULT_CATEGORIES

    order = list(DEFAULT_CATEGORIES)
    return sorted(report.tags(), key=lambda c: order.index(c) if c in order else len(order))


def _row(label: str, report: Report, categories: list[str], measures: list[str]) -> str:
    """One table row: the label, the accuracy, ``measures``, then correct/run per category."""
    (result,) = report.variants
    per = [report.tagged(category).variants[0] for category in categories]
    cells = [label, _rate(result), *measures, *(f"{r.correct}/{r.runs}" for r in per)]
    return "| " + " | ".join(cells) + " |"


def bfcl_table() -> str:
    """The BFCL rows in Markdown: overall, with the measures, then per category."""
    lines = []
    for model, label in MODELS.items():
        reports = bfcl_reports(model)
        if reports is None:
            continue
        categories = _categories(next(iter(reports.values())))
        lines += [
            f"{label}, {next(iter(reports.values())).variants[0].runs} BFCL cases "
            f"(the first of each category's fixed sample, every row on the same cases; "
            f"`corrected` and `repeated` count the runs a correction turn ran in):",
            "",
            "| answer sent as | correct | salvaged | repeated | calls/case | prompt tokens/case "
            "| wall s/case | " + " | ".join(categories) + " |",
            "| --- " * (7 + len(categories)) + "|",
        ]
        rows = [(v, what) for v, what in BASELINES if v in reports]
        for variant, what in rows + [(variant, what) for _, variant, what in BFCL_ROWS]:
            result = reports[variant].variants[0]
            measures = [
                _share(result.salvaged, result.corrected),
                _share(result.repeated_corrections, result.correction_turns),
                f"{result.calls_per_case:.2f}",
                f"{result.prompt_tokens / max(result.runs, 1):,.0f}",
                f"{result.wall_per_case_s:.1f}",
            ]
            lines.append(_row(f"{what} (`{variant}`)", reports[variant], categories, measures))
        lines.append("")
    return "\n".join(lines)


HEADLINE = (
    ("raw-lenient@template", "a raw call, its text read (no prompt)"),
    ("raw-prompted-lenient@template", "a raw call, the calls prompt, its text read"),
    ("subagent-prompted-r1@template", "`subagent-prompted-r1`"),
)
"""The headline rows: a raw call without and with the calls prompt, and subagent's best."""

HELD_OUT_DIRS = {"qwen1.5b": "bfcl-qwen1.5b-holdout"}
"""The model's held-out sample (``--offset 50 --cases 20``), kept apart from the fixed one."""

PEER_ROWS = (
    *HEADLINE,
    ("pydantic-ai@parsed", "pydantic-ai, its defaults"),
    ("openai-agents@parsed", "the Agents SDK, its defaults"),
)
"""The peers on the ``parsed`` set-up beside the template server's own rows: one server,
the model's own template, the calls it writes read by the same reader (``eval/calls_proxy.py``
for the peers, subagent's adapter for subagent)."""


@functools.cache  # the tables read one folder several times
def _graded(folder: Path) -> tuple[Outcome, ...]:
    """The folder's BFCL outcomes, graded by BFCL's checker (derived rows included)."""
    import bfcl_report

    return tuple(bfcl_report.read(folder).outcomes)


def _paired(folder: Path, variants: Sequence[str]) -> dict[str, Report]:
    """Each variant's report on the cases every one of them ran (empty where none)."""
    outcomes = _graded(folder)
    chosen = {variant: [o for o in outcomes if o.variant == variant] for variant in variants}
    common = set.intersection(*({o.case for o in found} for found in chosen.values()))
    if not common:
        return {}
    return {variant: Report("bfcl", [o for o in found if o.case in common])
            for variant, found in chosen.items()}  # fmt: skip


def _measured(rows: Sequence[tuple[str, str]], reports: dict[str, Report]) -> list[str]:
    """The rows as a Markdown table: accuracy, prompt tokens, wall time, per category."""
    categories = _categories(next(iter(reports.values())))
    lines = [
        "| system | correct | prompt tokens/case | prompt tokens/correct case "
        "| wall s/case | " + " | ".join(categories) + " |",
        "| --- " * (5 + len(categories)) + "|",
    ]
    for variant, what in rows:
        result = reports[variant].variants[0]
        measures = [
            f"{result.prompt_tokens / max(result.runs, 1):,.0f}",
            f"{result.prompt_tokens / result.correct:,.0f}" if result.correct else "-",
            f"{result.wall_per_case_s:.1f}",
        ]
        lines.append(_row(f"{what} (`{variant}`)", reports[variant], categories, measures))
    return lines


def paired_difference(first: Report, second: Report) -> tuple[int, int, float]:
    """Cases only ``first`` got right, cases only ``second`` did, and McNemar's exact p."""
    right = {o.case: o.correct for o in second.outcomes}
    only_first = sum(bool(o.correct) and not right[o.case] for o in first.outcomes)
    only_second = sum(not o.correct and bool(right[o.case]) for o in first.outcomes)
    return only_first, only_second, mcnemar(only_first, only_second)


def headline_table(model: str = "qwen1.5b", *, held_out: bool = False) -> str:
    """The headline rows on every case all of them ran, case for case, per category.

    A row with no record in the sample is left out (the held-out sample runs the raw call
    without the prompt last); without both ``raw-prompted-lenient`` and
    ``subagent-prompted-r1`` there is no table.

    Args:
        model: The local model whose records are read.
        held_out: Read the held-out sample (the 20 cases after each category's first 50)
            instead of the fixed one.
    """
    dirs = HELD_OUT_DIRS if held_out else BASELINE_DIRS
    folder = RESULTS.parent / dirs.get(model, f"bfcl-{model}")
    if not folder.exists():
        return ""
    recorded = {o.variant for o in _graded(folder)}
    rows = [(variant, what) for variant, what in HEADLINE if variant in recorded]
    reports = _paired(folder, [variant for variant, _ in rows])
    if not reports or len(rows) < 2 or rows[-1] != HEADLINE[-1]:
        return ""
    cases = next(iter(reports.values())).variants[0].runs
    sample = "held-out sample" if held_out else "fixed sample"
    lines = [f"{MODELS[model]}, {cases} BFCL cases of the {sample}, every row on the same cases:",
             "", *_measured(rows, reports), ""]  # fmt: skip
    ours, prompted = reports["subagent-prompted-r1@template"], reports[HEADLINE[1][0]]
    only_ours, only_prompted, p = paired_difference(ours, prompted)
    lines.append(
        f"Case for case, `subagent-prompted-r1` right where `raw-prompted-lenient` is wrong: "
        f"{only_ours}; the reverse: {only_prompted} (McNemar's exact test, p = {p:.2f})."
    )
    return "\n".join(lines)


def peers_table() -> str:
    """The peers against subagent and the raw call, case for case, per model recorded."""
    lines = []
    for model, label in MODELS.items():
        folder = RESULTS.parent / BASELINE_DIRS.get(model, f"bfcl-{model}")
        if not (folder / "pydantic-ai@parsed.jsonl").exists():
            continue
        reports = _paired(folder, [v for v, _ in PEER_ROWS])
        if not reports:
            continue
        cases = next(iter(reports.values())).variants[0].runs
        lines += [
            f"{label}, {cases} BFCL cases (the first of each category's fixed sample "
            "that every row ran):",
            "",
            *_measured(PEER_ROWS, reports),
            "",
        ]
    return "\n".join(lines)


SHORT = {
    "raw-prompted-lenient@template": "raw-prompted-lenient",
    "subagent-prompted-r1@template": "subagent-prompted-r1",
    "same-r0": "free",
    "same-r1": "free + text correction",
    "structured-r1": "free + schema correction",
    "structured-final": "final under schema",
    "structured-final-exact": "final under the calls' schema",
}


def _frame(axes: Any, xlabel: str, title: str, margin: float) -> None:
    """A panel's axis label, title, scale, grid and legend."""
    axes.set_xlabel(xlabel)
    axes.set_ylim(0, 100)
    axes.margins(x=margin)
    axes.set_title(title)
    axes.title.set_fontsize(10)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8, loc="lower right")


def _bfcl_panel(axes: Any) -> None:
    """BFCL's rows: correct against prompt tokens per case, per model."""
    for (model, label), marker in zip(MODELS.items(), ("o", "s"), strict=True):
        reports = bfcl_reports(model)
        if reports is None:
            continue
        colour = "tab:blue" if model == "qwen" else "tab:red"
        placed: list[tuple[float, float]] = []
        for variant, report in reports.items():
            (result,) = report.variants
            low, high = result.success_interval
            x = result.prompt_tokens / max(result.runs, 1)
            y = 100 * result.success_rate
            axes.errorbar(x, y, yerr=[[y - 100 * low], [100 * high - y]], fmt=marker,
                          capsize=3, color=colour)  # fmt: skip
            near = sum(abs(y - py) < 4 and abs(x - px) < 40 for px, py in placed)
            placed.append((x, y))
            axes.annotate(SHORT.get(variant, variant), (x, y), textcoords="offset points",
                          xytext=(6, 3 - 9 * near), fontsize=7, color=colour)  # fmt: skip
        axes.plot([], [], marker, color=colour, label=f"{label} ({result.runs} cases)")
    _frame(axes, "prompt tokens per case", "BFCL (5 categories, the same cases per model)", 0.3)


def plot(path: Path) -> None:
    """Success at ``return_retries=1`` against prompt tokens per case, per model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (axes, right) = plt.subplots(1, 2, figsize=(12, 4.4), width_ratios=(7, 5))
    _bfcl_panel(right)
    for (model, label), marker in zip(MODELS.items(), ("o", "s"), strict=True):
        colour = "tab:blue" if model == "qwen" else "tab:red"
        if not (RESULTS / model / "tasks.jsonl").exists():
            continue
        first = None
        labels: dict[tuple[int, int], list[str]] = {}  # settings on one spot share a label
        for setting, r0, r1, _ in rows(model):
            first = first or r0
            low, high = r1.success_interval
            x = r1.prompt_tokens / max(r1.runs, 1)
            y = 100 * r1.success_rate
            axes.errorbar(x, y, yerr=[[y - 100 * low], [100 * high - y]], fmt=marker,
                          capsize=3, color=colour)  # fmt: skip
            labels.setdefault((round(x / 4), round(y)), []).append(setting)
        for extra, star in (("structured-final", "*"), ("defaults", "D")):
            final = RESULTS / model / f"{extra}.jsonl"
            if not (final.exists() and final.stat().st_size):
                continue
            (whole,) = Report.read(final).variants
            low, high = whole.success_interval
            x = whole.prompt_tokens / max(whole.runs, 1)
            y = 100 * whole.success_rate
            axes.errorbar(x, y, yerr=[[y - 100 * low], [100 * high - y]], fmt=star, ms=8,
                          capsize=3, color=colour)  # fmt: skip
            labels.setdefault((round(x / 4), round(y)), []).append(extra)
        for (x4, y), names in labels.items():
            below = names == ["defaults"]  # beside structured-final: its label goes under
            axes.annotate(", ".join(names), (4 * x4, y), textcoords="offset points",
                          xytext=(6, -12 if below else 3), fontsize=8)  # fmt: skip
        if first is not None:
            x0 = first.prompt_tokens / max(first.runs, 1)
            axes.plot(x0, 100 * first.success_rate, marker, mfc="none", ms=10, color=colour,
                      label=f"{label}: no correction (r0)")  # fmt: skip
    axes.set_ylabel("correct, % (95% CI)")
    title = "make eval's typed tasks: what one correction turn buys, by how it is sent"
    _frame(axes, "prompt tokens per case (return_retries=1)", title, 0.15)
    figure.tight_layout()
    figure.savefig(path, dpi=100)


PAGE = Path(__file__).resolve().parents[1] / "docs" / "evaluation.md"
"""The page whose marked tables :func:`update_page` writes."""


DEFAULTS_ROWS = (
    ("typed tasks", "corrections/{model}/tasks", "same-r1", "corrections/{model}/defaults",
     "defaults"),
    ("BFCL, a list of calls", "corrections/{model}/bfcl-contract", "same-r1",
     "corrections/{model}/bfcl-contract", "structured-r1"),
    ("BFCL held out, the tool agent", "{held_out}/subagent-tools-r1@template",
     "subagent-tools-r1@template", "{held_out}-defaults/subagent-tools-r1@template",
     "subagent-tools-r1@template"),
)  # fmt: skip
"""The defaults' before and after: (what, before's records, variant, after's, variant).

Paths under ``eval/results``. Before: the correction as the work turns (the default until
these records); after: what the default sends now (an object output: the final turn and
its correction under the schema, a run of ``eval/typed_defaults.py``; a list of calls: the
correction under it, the study's ``structured`` setting, whose requests are the
default's; the tool agent with no prompt of its own, ``subagent-tools-r1``, run by main
before and after the change on BFCL's held-out sample)."""

HELD_OUT = {"qwen": "bfcl-holdout", "qwen1.5b": "bfcl-qwen1.5b-holdout"}
"""Each model's held-out BFCL records."""


def _correct_by_case(path: Path, variant: str) -> dict[str, tuple[bool, str]]:
    """Each case's (correct, category) under ``variant`` in the records at ``path``."""
    found = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record["variant"] == variant:
            category = record["tags"][0] if record["tags"] else record["case"].rsplit("_", 1)[0]
            found[record["case"]] = (bool(record["correct"]), category)
    return found


def defaults_table() -> str:
    """Today's defaults against the ones before, case for case, by category."""
    return _before_after(DEFAULTS_ROWS, "before: as the work turns | after: the default")


PROMPTS_ROWS = (
    ("typed tasks (before: the default correction, the schema alone)",
     "corrections/{model}/defaults-schema-only", "defaults",
     "corrections/{model}/defaults-fail-offered", "defaults"),
    ("BFCL, the tool agent (before: 0cd476b)", "{fixed}/subagent-tools-r1@template",
     "subagent-tools-r1@template", "{fixed_after}/subagent-tools-r1@template",
     "subagent-tools-r1@template"),
    ("BFCL held out, the tool agent (before: 0cd476b)", "{held_out}/subagent-tools-r1@template",
     "subagent-tools-r1@template", "{held_out}-prompts/subagent-tools-r1@template",
     "subagent-tools-r1@template"),
)  # fmt: skip
"""The default prompts' before and after (the tool rule shared with the calls prompt, the
output's shape beside its schema): (what, before's records, variant, after's, variant).
Typed tasks: ``eval/typed_defaults.py`` before and after the prompts; BFCL: the tool agent
with no prompt of its own at 0cd476b and with today's library, on the cases both ran."""

FIXED = {
    "qwen": ("bfcl-tools-before", "bfcl-tools-prompts", "bfcl-tools-nofail"),
    "qwen1.5b": ("bfcl-qwen1.5b", "bfcl-qwen1.5b-tools-prompts", "bfcl-qwen1.5b-nofail"),
}
"""Each model's fixed-sample records of the tool agent: before (0cd476b), after the default
prompts, after the explicit fail went off by default."""

FAIL_ROWS = (
    ("typed tasks", "corrections/{model}/defaults-fail-offered", "defaults",
     "corrections/{model}/defaults", "defaults"),
    ("BFCL, the tool agent", "{fixed_after}/subagent-tools-r1@template",
     "subagent-tools-r1@template", "{fixed_nofail}/subagent-tools-r1@template",
     "subagent-tools-r1@template"),
    ("BFCL held out, the tool agent", "{held_out}-prompts/subagent-tools-r1@template",
     "subagent-tools-r1@template", "{held_out}-nofail/subagent-tools-r1@template",
     "subagent-tools-r1@template"),
)  # fmt: skip
"""The explicit fail offered (``allow_fail=None`` before) against not offered (today's
default), everything else as the default prompts' rows: ``eval/typed_defaults.py`` and
the tool agent's BFCL runs, made again."""


def _before_after(rows: Sequence[tuple[str, str, str, str, str]], header: str) -> str:
    """One line per model and row: the cases both records hold, compared case for case."""
    lines = [
        f"| model | cases | {header} | only before | only after | p | by category "
        "(before -> after) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for model, label in MODELS.items():
        for what, before_file, before, after_file, after in rows:
            fixed, fixed_after, fixed_nofail = FIXED[model]
            names = {"model": model, "held_out": HELD_OUT[model], "fixed": fixed,
                     "fixed_after": fixed_after, "fixed_nofail": fixed_nofail}  # fmt: skip
            paths = (
                RESULTS.parent / f"{before_file.format(**names)}.jsonl",
                RESULTS.parent / f"{after_file.format(**names)}.jsonl",
            )
            if not all(path.exists() for path in paths):
                continue
            old, new = _correct_by_case(paths[0], before), _correct_by_case(paths[1], after)
            cases = sorted(set(old) & set(new))
            if not cases:
                continue
            only_old = sum(old[c][0] and not new[c][0] for c in cases)
            only_new = sum(new[c][0] and not old[c][0] for c in cases)
            categories: dict[str, list[int]] = {}
            for case in cases:
                counts = categories.setdefault(old[case][1], [0, 0, 0])
                counts[0] += old[case][0]
                counts[1] += new[case][0]
                counts[2] += 1
            shown = ", ".join(f"{name} {a}/{n} -> {b}/{n}"
                              for name, (a, b, n) in sorted(categories.items()))  # fmt: skip
            lines.append(
                f"| {label} | {what}: {len(cases)} | {sum(old[c][0] for c in cases)} "
                f"| {sum(new[c][0] for c in cases)} | {only_old} | {only_new} "
                f"| {mcnemar(only_old, only_new):.3g} | {shown} |"
            )
    return "\n".join(lines)


def prompts_table() -> str:
    """The default prompts against the ones before, case for case, by category."""
    return _before_after(PROMPTS_ROWS, "before | after: the default prompts")


def fail_table() -> str:
    """The explicit fail offered against not, case for case, by category."""
    return _before_after(FAIL_ROWS, "offered | not offered (the default)")


CHAT = RESULTS.parent / "chat"
CHAT_ROWS = (
    ("", "fail-line", "the agent, its system prompt offering the explicit fail"),
    ("", "no-fail-line", "the agent, without it (the default)"),
    ("-raw", "raw", "control: a raw call, the conversation alone, no system prompt"),
)
"""The chat set's rows: (records file suffix, variant, what it is)."""


def chat_table() -> str:
    """The chat set (``eval/chat.py``): answered, right, failed, per model and variant."""
    lines = [
        "| model | what | right | answered (not failed) | explicit fails |",
        "| --- | --- | --- | --- | --- |",
    ]
    for model, label in MODELS.items():
        for suffix, variant, what in CHAT_ROWS:
            path = CHAT / f"{model}{suffix}.jsonl"
            if not path.exists():
                continue
            report = Report.read(path)
            if variant not in {result.variant for result in report.variants}:
                continue
            result = report.variant(variant)
            lines.append(
                f"| {label} | {what} | {_rate(result)} ({result.correct}/{result.runs}) "
                f"| {result.valid}/{result.runs} | {result.failed.get('explicit_fail', 0)} |"
            )
    return "\n".join(lines)


def tables() -> dict[str, str]:
    """Every table of the study, by the name of the page's markers around it."""
    return {
        "defaults": defaults_table(),
        "prompts": prompts_table(),
        "fail": fail_table(),
        "chat": chat_table(),
        "tasks": table(),
        "bfcl": bfcl_table(),
        "headline": headline_table(),
        "held-out": headline_table(held_out=True),
        "peers": peers_table(),
    }


def markers(name: str) -> tuple[str, str]:
    """The comments around the table called ``name`` on the page."""
    return (f"<!-- correction-report:{name} (eval/correction_report.py --page writes this) -->",
            f"<!-- correction-report:{name}:end -->")  # fmt: skip


def update_page(content: str, written: dict[str, str]) -> str:
    """``content`` with each marked table replaced by its text in ``written``.

    A table the page has no markers for is left out; markers of a table not in
    ``written`` are left as they are.

    Raises:
        ValueError: A table's start marker without its end marker (the name is given).
    """
    for name, text in written.items():
        start, end = markers(name)
        if start not in content:
            continue
        head, rest = content.split(start, 1)
        if end not in rest:
            raise ValueError(f"the page's table {name!r} has no end marker {end!r}")
        tail = rest.split(end, 1)[1]
        content = f"{head}{start}\n{text.strip()}\n{end}{tail}"
    return content


def main() -> None:
    """Print the tables, or write them into the page; draw the plot when asked."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plot", type=Path, default=None)
    parser.add_argument(
        "--page", type=Path, nargs="?", const=PAGE, default=None,
        help=f"write the tables between the page's markers (default {PAGE.name})",
    )  # fmt: skip
    args = parser.parse_args()
    written = tables()
    if args.page is None:
        print("\n\n".join(text for text in written.values() if text))
    else:
        content = args.page.read_text(encoding="utf-8")
        args.page.write_text(update_page(content, written), encoding="utf-8")
    if args.plot is not None:
        plot(args.plot)


if __name__ == "__main__":
    main()
