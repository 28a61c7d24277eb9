"""The report as one self-contained HTML page (``Report.to_html``, ``eval report --html``).

One file: its style inline, no script, no external asset, so it opens anywhere and can be
attached to a CI run. Every text in it is escaped (case names, variant names, outputs and
reasons come from users and models: untrusted). Its size is bounded: outputs and reasons
are cut at :data:`OUTPUT_CHARS` characters, and the per-case table lists at most
:data:`HTML_CASES` cases (the JSON report has them all).

The tables are the Markdown report's: per variant (success with its interval, salvage,
calls, tokens, cost, wall time), per judge (pass rate, mean score, the judge's own tokens),
then per case which variant got it right, and, when the records are given, each run's
output and the verdicts that failed it.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from subagent._text import shorten
from subagent.evals._records import read_records

# A Report, typed loosely: the report module imports this one (Report.to_html), and the
# evals room keeps its modules free of cycles, type-only imports included.
Report = Any

__all__ = ["HTML_CASES", "OUTPUT_CHARS", "report_html"]

OUTPUT_CHARS: Final = 500
"""Characters kept of a run's output, and of a verdict's reason, in the HTML report."""
HTML_CASES: Final = 500
"""Cases (with their repetitions) listed in the HTML report's per-case table."""

_Key = tuple[str, int, str]  # case, repetition, variant

_STYLE: Final = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
td.right { background: #e6f4e6; } td.wrong { background: #fbe9e9; }
td.failed { background: #fdf3dc; } td.none { color: #999; }
pre { white-space: pre-wrap; word-break: break-word; max-width: 40em; margin: 0.3em 0; }
p.note { color: #555; }
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _table(header: Sequence[str], rows: Iterable[Sequence[str]], raw: bool = False) -> str:
    """A table; cells are escaped unless ``raw`` (cells already HTML)."""
    head = "".join(f"<th>{_e(cell)}</th>" for cell in header)
    body = "".join(
        "<tr>" + "".join(cell if raw else f"<td>{_e(cell)}</td>" for cell in row) + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _shown_text(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return shorten(text, OUTPUT_CHARS)


def _detail(record: Mapping[str, Any]) -> str:
    """What a run's cell shows of its record: its output (or failure), the failed verdicts."""
    run = record.get("step") or record.get("run") or {}
    failure = run.get("failure")
    if failure is None:
        parts = ["output: " + _shown_text(run.get("output"))]
    elif isinstance(failure, Mapping):  # a Step's Failure
        parts = [f"failed ({failure.get('reason')}): " + _shown_text(failure.get("message", ""))]
    else:  # a system's run
        parts = [f"failed ({failure}): " + _shown_text(run.get("message") or "")]
    for verdict in record.get("verdicts") or ():
        if not verdict.get("passed"):
            said = verdict.get("error") or verdict.get("reason") or "failed"
            parts.append(f"{verdict.get('judge')}: " + shorten(str(said), OUTPUT_CHARS))
    return "\n".join(parts)


def _details(path: Path, report: Report, shown: set[tuple[str, int]]) -> dict[_Key, str]:
    """The cells' texts of the runs the report counts and the page lists, from the records.

    The last record of a run wins, as in the report; a record of a case since edited (another
    digest than the counted outcome's) is left out.
    """
    counted = {(o.case, o.repeat, o.variant): o.case_digest for o in report.outcomes}
    found: dict[_Key, str] = {}
    for record in read_records(path):
        key = (record["case"], record.get("repeat", 0), record["variant"])
        if key[:2] in shown and counted.get(key) == record["case_digest"]:
            found[key] = _detail(record)
    return found


def _cell(outcome: Any, detail: str | None) -> str:
    if outcome is None:
        return '<td class="none">-</td>'
    if outcome.correct:
        kind, label = "right", "right"
    elif outcome.ok:
        kind, label = "wrong", "wrong"
    else:
        kind, label = "failed", f"failed: {outcome.failure}"
    inner = _e(label)
    if detail is not None:
        inner += f"<details><summary>run</summary><pre>{_e(detail)}</pre></details>"
    return f'<td class="{kind}">{inner}</td>'


def report_html(
    report: Report,
    columns: Sequence[str],
    margin: float,
    alpha: float,
    records: str | Path | None = None,
) -> str:
    """The HTML page of ``report`` (see the module).

    Args:
        report: The report.
        columns: The variants' table's columns (the report's own).
        margin: The recommendation's margin.
        alpha: The recommendation's significance level.
        records: The records file the report counts, for the runs' outputs and the
            verdicts' reasons in the per-case table; ``None``: the marks only.
    """
    title = f"{report.dataset}: evaluation"
    runs = f"{len(report.outcomes)} runs; cost measured in {report.measure}."
    parts = [f"<h1>{_e(title)}</h1>", f"<p>{_e(runs)}</p>"]
    parts.append("<h2>Variants</h2>")
    parts.append(_table(columns, (v.cells() for v in report.variants)))
    crashed = report.crashed
    if crashed:
        parts.append(
            f"<p><strong>{crashed} of {len(report.outcomes)} runs never ran to a result</strong> "
            "(they raised, or the model could not be reached), so nothing is recommended.</p>"
        )
    recommendation = report.recommend(margin, alpha)
    if recommendation is not None:
        parts.append(f"<p><strong>Recommended:</strong> {_e(recommendation.reason)}</p>")
    failures = [
        f"{v.variant}: " + ", ".join(f"{r} {n}" for r, n in sorted(v.failed.items()))
        for v in report.variants
        if v.failed
    ]
    if failures:
        parts.append(f"<p>Failed runs by reason: {_e('; '.join(failures))}.</p>")
    errors = [f"{v.variant} {v.judge_errors}" for v in report.variants if v.judge_errors]
    if errors:
        parts.append(
            f"<p>Runs a judge raised on (not counted correct): {_e(', '.join(errors))}</p>"
        )
    judges = [
        [v.variant, judge, str(r.judged), str(r.passed), f"{r.pass_rate:.0%}",
         "-" if r.mean_score is None else f"{r.mean_score:.3g}",
         f"{r.tokens:,}" if r.tokens else "-"]
        for v in report.variants
        for judge, r in v.judges.items()
        if r.pass_rate is not None
    ]  # fmt: skip
    if judges:
        parts.append("<h2>Judges</h2>")
        header = ["variant", "judge", "judged (valid runs)", "passed", "pass rate",
                  "mean score", "judge's tokens"]  # fmt: skip
        parts.append(_table(header, judges))
    parts += _cases(report, records)
    body = "\n".join(parts)
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{_e(title)}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n{body}\n"
        "</body>\n</html>\n"
    )


def _cases(report: Report, records: str | Path | None) -> list[str]:
    cases = report.cases()
    listed = cases[:HTML_CASES]
    names = [v.variant for v in report.variants]
    outcomes = {(o.case, o.repeat, o.variant): o for o in report.outcomes}
    details: dict[_Key, str] = {}
    if records is not None:
        details = _details(Path(records), report, {(c.case, c.repeat) for c in listed})
    rows = []
    for result in listed:
        label = result.case if result.repeat == 0 else f"{result.case} #{result.repeat}"
        cells = [f"<td>{_e(label)}</td>"]
        for name in names:
            key = (result.case, result.repeat, name)
            cells.append(_cell(outcomes.get(key), details.get(key)))
        rows.append(cells)
    parts = ["<h2>Cases</h2>", _table(["case", *names], rows, raw=True)]
    notes = []
    if len(cases) > HTML_CASES:
        notes.append(f"{len(cases) - HTML_CASES} more cases are in the JSON report "
                     f"(this page lists {HTML_CASES}).")  # fmt: skip
    if records is not None:
        notes.append(f"Outputs and reasons are cut at {OUTPUT_CHARS} characters.")
    if notes:
        parts.append(f'<p class="note">{_e(" ".join(notes))}</p>')
    return parts
