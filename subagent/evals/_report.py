"""The report of an evaluation: per variant, what it bought and what it cost.

Built from outcomes (:mod:`subagent.evals._outcomes`), never from Steps held in memory: a
file of records streams through :meth:`Report.read`, one line at a time. The last record of
a case, repetition and variant wins (an edited case or variant ran again later).
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel

from subagent._stats import percentile, wilson
from subagent.evals._cases import Case
from subagent.evals._compare import (
    Comparison,
    Recommendation,
    by_variant,
    compare_outcomes,
    measure_of,
    recommend_variant,
)
from subagent.evals._html import report_html
from subagent.evals._outcomes import Outcome, outcome_from_data
from subagent.evals._records import read_records

__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_MARGIN",
    "CaseResult",
    "JudgeResult",
    "Report",
    "Tally",
    "VariantResult",
]

DEFAULT_MARGIN: Final = 0.05
"""The loss of success rate the recommendation accepts for a cheaper variant (5 points)."""
DEFAULT_ALPHA: Final = 0.05
"""The significance level of the paired tests."""
CASES_SHOWN: Final = 20
"""Cases listed in the Markdown report where the variants disagree (all are in the JSON)."""


class JudgeResult(BaseModel):
    """What one judge made of one variant's valid runs.

    Attributes:
        judged: Runs it judged (judges see valid outputs only).
        passed: Runs it passed.
        pass_rate: ``passed / judged`` (``None`` when it judged none).
        mean_score: Its mean score, where it gives scores (``FieldsMatch``, an LLM judge).
        tokens: The tokens it spent judging (an LLM judge: what judging itself cost).
    """

    judged: int = 0
    passed: int = 0
    pass_rate: float | None = None
    mean_score: float | None = None
    tokens: int = 0


def _judge_results(outcomes: Sequence[Outcome]) -> dict[str, JudgeResult]:
    verdicts: dict[str, list[tuple[bool, float | None, int]]] = {}
    for outcome in outcomes:
        for judge, passed, score, tokens in outcome.judged:
            verdicts.setdefault(judge, []).append((passed, score, tokens))
    results = {}
    for judge, given in verdicts.items():
        count = sum(ok for ok, _, _ in given)
        scores = [s for _, s, _ in given if s is not None]
        results[judge] = JudgeResult(
            judged=len(given), passed=count, pass_rate=count / len(given),
            mean_score=sum(scores) / len(scores) if scores else None,
            tokens=sum(t for _, _, t in given),
        )  # fmt: skip
    return results


class VariantResult(BaseModel):
    """What one variant came to.

    Attributes:
        variant: Its name.
        options: Its options (as recorded).
        model: The model's name, when the records say it.
        runs: Runs recorded.
        correct: Runs valid and passed by every judge.
        success_rate: ``correct / runs``.
        success_interval: The Wilson 95% interval of the success rate.
        valid: Runs that produced a valid output.
        valid_but_wrong: Valid runs a judge failed.
        failed: Runs that failed, by failure reason.
        judge_errors: Runs on which a judge raised (errors of the judge, not the run).
        corrected: Runs whose first answer failed validation, so a correction turn ran.
        salvaged: Of those, the runs that ended correct.
        salvage_rate: ``salvaged / corrected`` (``None`` without a correction).
        correction_turns: Correction turns in all.
        repeated_corrections: Correction turns whose reply repeated a refused reply,
            whitespace aside.
        repeat_rate: ``repeated_corrections / correction_turns`` (``None`` without one).
        calls: LLM calls in all; ``calls_per_case`` per run.
        prompt_tokens: Prompt tokens in all (nested agents included).
        completion_tokens: Completion tokens in all.
        cost: What the tokens cost (``None`` when a run's model had no price).
        cost_per_case: Cost per run; ``cost_per_success`` per correct run.
        wall_s: The runs' wall time summed; ``wall_per_case_s`` per run,
            ``wall_per_success_s`` per correct run, ``wall_p50_s`` / ``wall_p95_s`` its
            percentiles (the median, and the nearest-rank 95th percentile).
        stop_reasons: How many replies ended for each stop reason (``stop``, ``length``:
            cut at the token limit, ``tool_calls``...), most frequent first.
        crashed: Runs that never became a result of the variant: they raised (a bug in the
            agent, a tool, a validator) or their model could not be reached (failure
            ``error`` or ``llm_error``; ``subagent eval run --rerun-failed`` makes them
            again). Counted in ``runs`` and never correct.
        crash_kinds: Those runs by what went wrong (the exception's class, or the transport
            error's kind); ``crash_sample``: one of their messages.
        judges: Per judge (by name): the runs it judged (the valid ones), how many it
            passed, its pass rate and, where it scores, its mean score.
    """

    variant: str
    options: dict[str, Any] = {}
    model: str | None = None
    runs: int = 0
    correct: int = 0
    success_rate: float = 0.0
    success_interval: tuple[float, float] = (0.0, 1.0)
    valid: int = 0
    valid_but_wrong: int = 0
    failed: dict[str, int] = {}
    judge_errors: int = 0
    corrected: int = 0
    salvaged: int = 0
    salvage_rate: float | None = None
    correction_turns: int = 0
    repeated_corrections: int = 0
    repeat_rate: float | None = None
    calls: int = 0
    calls_per_case: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float | None = None
    cost_per_case: float | None = None
    cost_per_success: float | None = None
    wall_s: float = 0.0
    wall_per_case_s: float = 0.0
    wall_per_success_s: float | None = None
    wall_p50_s: float = 0.0
    wall_p95_s: float = 0.0
    stop_reasons: dict[str, int] = {}
    crashed: int = 0
    crash_kinds: dict[str, int] = {}
    crash_sample: str | None = None
    judges: dict[str, JudgeResult] = {}

    @classmethod
    def of(
        cls, variant: str, outcomes: list[Outcome], options: dict[str, Any], model: str | None
    ) -> VariantResult:
        """Count ``outcomes`` (one variant's)."""
        runs = len(outcomes)
        correct = sum(o.correct for o in outcomes)
        valid = sum(o.ok for o in outcomes)
        corrected = sum(o.corrected for o in outcomes)
        salvaged = sum(o.salvaged for o in outcomes)
        turns = sum(o.correction_turns for o in outcomes)
        repeated = sum(o.repeated_corrections for o in outcomes)
        calls = sum(o.calls for o in outcomes)
        costs = [o.cost for o in outcomes]
        cost = None if any(c is None for c in costs) else sum(c or 0.0 for c in costs)
        durations = [o.duration_s for o in outcomes]
        wall = sum(durations)
        stops: Counter[str] = Counter()
        for outcome in outcomes:
            stops.update(dict(outcome.stop_reasons))
        crashes = [o for o in outcomes if o.crashed]
        return cls(
            variant=variant,
            options=options,
            model=model,
            runs=runs,
            correct=correct,
            success_rate=correct / runs if runs else 0.0,
            success_interval=wilson(correct, runs),
            valid=valid,
            valid_but_wrong=valid - correct,
            failed=dict(Counter(o.failure for o in outcomes if o.failure is not None)),
            judge_errors=sum(o.judge_errors > 0 for o in outcomes),
            corrected=corrected,
            salvaged=salvaged,
            salvage_rate=salvaged / corrected if corrected else None,
            correction_turns=turns,
            repeated_corrections=repeated,
            repeat_rate=repeated / turns if turns else None,
            calls=calls,
            calls_per_case=calls / runs if runs else 0.0,
            prompt_tokens=sum(o.input_tokens for o in outcomes),
            completion_tokens=sum(o.output_tokens for o in outcomes),
            cost=cost,
            cost_per_case=None if cost is None or not runs else cost / runs,
            cost_per_success=None if cost is None or not correct else cost / correct,
            wall_s=wall,
            wall_per_case_s=wall / runs if runs else 0.0,
            wall_per_success_s=wall / correct if correct else None,
            wall_p50_s=statistics.median(durations) if durations else 0.0,
            wall_p95_s=percentile(durations, 0.95),
            stop_reasons=dict(sorted(stops.items(), key=lambda item: (-item[1], item[0]))),
            crashed=len(crashes),
            crash_kinds=dict(Counter(_crash_kind(o) for o in crashes)),
            crash_sample=next((o.error for o in crashes if o.error), None),
            judges=_judge_results(outcomes),
        )

    def row(self) -> str:
        """The variant as a row of the Markdown table."""
        return "| " + " | ".join(self.cells()) + " |"

    def cells(self) -> list[str]:
        """The variant's cells in the report's table (Markdown's and HTML's)."""
        low, high = self.success_interval
        salvage = "-" if self.salvage_rate is None else (
            f"{self.salvaged}/{self.corrected} ({self.salvage_rate:.0%})"
        )  # fmt: skip
        repeats = "-" if self.repeat_rate is None else (
            f"{self.repeated_corrections}/{self.correction_turns} ({self.repeat_rate:.0%})"
        )  # fmt: skip
        per_case = "-" if self.cost_per_case is None else f"{self.cost_per_case:.4g}"
        per_success = "-" if self.cost_per_success is None else f"{self.cost_per_success:.4g}"
        wall_success = "-" if self.wall_per_success_s is None else f"{self.wall_per_success_s:.2f}"
        return [
            self.variant,
            str(self.runs),
            f"{self.success_rate:.1%} [{100 * low:.0f}-{100 * high:.0f}]",
            str(self.valid_but_wrong),
            salvage,
            repeats,
            f"{self.calls_per_case:.2f}",
            f"{self.prompt_tokens:,}",
            f"{self.completion_tokens:,}",
            per_case,
            per_success,
            f"{self.wall_per_case_s:.2f} / {wall_success}",
            f"{self.wall_p50_s:.2f} / {self.wall_p95_s:.2f}",
        ]


def _crash_kind(outcome: Outcome) -> str:
    """What went wrong in a crashed run: ``RuntimeError``, ``llm_error: connection``..."""
    head = (outcome.error or "").split(":", 1)[0].strip()
    if outcome.failure == "llm_error":
        return f"llm_error: {head}" if head else "llm_error"
    return head if head.isidentifier() else "error"


class CaseResult(BaseModel):
    """One case (one repetition) across the variants.

    Attributes:
        case: Its name.
        repeat: The repetition (from 0).
        correct: By variant: whether its run was correct.
    """

    case: str
    repeat: int = 0
    correct: dict[str, bool]


COLUMNS: Final = (
    "variant", "runs", "success [95% CI]", "valid but wrong", "salvaged",
    "repeated corrections", "calls/case", "prompt tokens", "completion tokens", "cost/case",
    "cost/success", "wall s/case / per success", "wall p50 / p95 s",
)  # fmt: skip
"""The columns of the variants' table (:meth:`VariantResult.cells`)."""
_HEADER = "| " + " | ".join(COLUMNS) + " |\n|" + " --- |" * len(COLUMNS)


class Report:
    """An evaluation's results: per variant, per case, and the variant to use.

    ``print(report)`` shows the Markdown; :meth:`to_json` the same as data (every record's
    outcome included, so a comparison can be redone from it). :meth:`read` builds it from
    a file of records alone.

    Attributes:
        dataset: The dataset's name.
        variants: One result per variant, in the order they were planned.
        outcomes: Every run counted (the last record of each case, repetition and
            variant), as small outcomes.
        pending: Runs an evaluation planned but did not record because its own usage
            limits (``batch_limits``) were reached: evaluating again runs them. Not part of
            the records (0 for a report read from a file).
    """

    def __init__(
        self,
        dataset: str,
        outcomes: Iterable[Outcome],
        options: Mapping[str, dict[str, Any]] | None = None,
        models: Mapping[str, str | None] | None = None,
    ):
        self.dataset = dataset
        self.outcomes: list[Outcome] = _in_order(outcomes)
        self.pending = 0
        self._grouped = by_variant(self.outcomes)
        options = self._options = dict(options or {})
        models = self._models = dict(models or {})
        self.variants = [
            VariantResult.of(name, group, dict(options.get(name, {})), models.get(name))
            for name, group in self._grouped.items()
        ]

    @classmethod
    def read(cls, path: str | Path, cases: Iterable[Case[Any]] | None = None) -> Report:
        """The report of a file of records (``subagent eval report FILE``).

        Args:
            path: The records file.
            cases: Count only the records of these cases as they are now (the same name
                and digest): the records of a case since edited or removed are left out.
                Default: every record.

        Raises:
            ConfigurationError: A line is not a record (naming the file and line).
        """
        path = Path(path)
        current = None if cases is None else {(case.name, case.digest) for case in cases}
        tally = Tally()
        for record in read_records(path):
            if current is None or (record["case"], record["case_digest"]) in current:
                tally.add(outcome_from_data(record), record)
        return tally.report(path.stem)

    def tagged(self, *tags: str) -> Report:
        """The report of the runs whose case has any of ``tags`` (per category, say)."""
        wanted = set(tags)
        chosen = [o for o in self.outcomes if wanted.intersection(o.tags)]
        return Report(self.dataset, chosen, self._options, self._models)

    def tags(self) -> list[str]:
        """The cases' tags, in the order they first appear."""
        return list(dict.fromkeys(tag for outcome in self.outcomes for tag in outcome.tags))

    @property
    def measure(self) -> str:
        """What cost counts in: ``cost`` (every run priced), ``tokens`` or ``calls``."""
        return measure_of(self.outcomes)

    def variant(self, name: str) -> VariantResult:
        """The result of the variant called ``name``.

        Raises:
            KeyError: No such variant (the message lists them).
        """
        for result in self.variants:
            if result.variant == name:
                return result
        raise KeyError(f"no variant {name!r}; there are: {', '.join(self._grouped)}")

    def cases(self) -> list[CaseResult]:
        """Per case (and repetition): which variants got it right."""
        found: dict[tuple[str, int], dict[str, bool]] = {}
        for outcome in self.outcomes:
            found.setdefault((outcome.case, outcome.repeat), {})[outcome.variant] = outcome.correct
        return [CaseResult(case=case, repeat=repeat, correct=correct)
                for (case, repeat), correct in found.items()]  # fmt: skip

    def recommend(
        self, margin: float = DEFAULT_MARGIN, alpha: float = DEFAULT_ALPHA
    ) -> Recommendation | None:
        """The cheapest variant whose success is within ``margin`` of the best.

        A variant qualifies when its success rate is at most ``margin`` below the best's
        and McNemar's exact test on the cases both ran finds no significant difference at
        ``alpha``. Cheapest by cost when every run was priced, else by tokens, else by
        calls. ``None`` with a single variant, or when a run crashed (raised, or its model
        could not be reached): a run that never ran says nothing of its variant.
        """
        if any(outcome.crashed for outcome in self.outcomes):
            return None
        return recommend_variant(self._grouped, margin=margin, alpha=alpha)

    @property
    def crashed(self) -> int:
        """Runs that raised or whose model could not be reached (see ``VariantResult``)."""
        return sum(result.crashed for result in self.variants)

    @property
    def recommendation(self) -> Recommendation | None:
        """:meth:`recommend` with the default margin (5 points) and alpha (0.05)."""
        return self.recommend()

    def compare(
        self, baseline: Report, alpha: float = DEFAULT_ALPHA, max_drop: float | None = None
    ) -> Comparison:
        """This evaluation against ``baseline``, case by case.

        Variants pair by name (two evaluations of one variant each pair whatever their
        names); cases by name, inputs digest and repetition. Success and salvage by
        McNemar's exact test, cost by the Wilcoxon signed-rank test, all the tests adjusted
        together by Holm's method (``alpha`` for the whole comparison). ``max_drop``: a
        success rate that falls by more (0.1: ten points) is a regression whatever the
        test, so a small dataset can still fail a build on a large drop.
        """
        return compare_outcomes(self._grouped, baseline._grouped, alpha=alpha, max_drop=max_drop)

    def to_markdown(self, margin: float = DEFAULT_MARGIN, alpha: float = DEFAULT_ALPHA) -> str:
        """The report as Markdown.

        The variants' table, the recommendation (by ``margin`` and ``alpha``, see
        :meth:`recommend`), the cases where the variants disagree.
        """
        lines = [f"## {self.dataset}", "", _HEADER, *(v.row() for v in self.variants), ""]
        lines += self._crashes()
        recommendation = self.recommend(margin, alpha)
        if recommendation is not None:
            lines += [f"**Recommended:** {recommendation.reason}", ""]
        failures = [f"{v.variant}: " + ", ".join(f"{r} {n}" for r, n in sorted(v.failed.items()))
                    for v in self.variants if v.failed]  # fmt: skip
        if failures:
            lines += ["Failed runs by reason: " + "; ".join(failures) + ".", ""]
        errors = [f"{v.variant} {v.judge_errors}" for v in self.variants if v.judge_errors]
        if errors:
            lines += ["Runs a judge raised on (not counted correct): " + ", ".join(errors), ""]
        lines += self._judges()
        lines += self._all_wrong()
        if len(self.variants) > 1:
            lines += self._disagreements()
        return "\n".join(lines).rstrip() + "\n"

    def _judges(self) -> list[str]:
        """A row per variant and judge: what each judge passed of the valid runs."""
        rows = [
            f"| {v.variant} | {judge} | {result.judged} | {result.passed} ({result.pass_rate:.0%}) "
            f"| {'-' if result.mean_score is None else f'{result.mean_score:.3g}'} "
            f"| {f'{result.tokens:,}' if result.tokens else '-'} |"
            for v in self.variants
            for judge, result in v.judges.items()
            if result.pass_rate is not None
        ]
        if not rows:
            return []
        return ["| variant | judge | judged (valid runs) | passed | mean score | judge's tokens |",
                "| --- | --- | --- | --- | --- | --- |", *rows, ""]  # fmt: skip

    def _all_wrong(self) -> list[str]:
        """The cases no variant got right (what a better setting alone will not fix)."""
        wrong = [c for c in self.cases() if not any(c.correct.values())]
        if not wrong:
            return []
        names = [c.case if c.repeat == 0 else f"{c.case} #{c.repeat}" for c in wrong]
        shown = ", ".join(names[:CASES_SHOWN]) + (
            f" (and {len(names) - CASES_SHOWN} more)" if len(names) > CASES_SHOWN else ""
        )
        every = "the variant" if len(self.variants) == 1 else "every variant"
        return [f"Cases {every} got wrong ({len(wrong)}): {shown}.", ""]

    def _crashes(self) -> list[str]:
        """What the report says of runs that crashed: how many, what, and what to do."""
        crashed = [v for v in self.variants if v.crashed]
        if not crashed:
            return []
        total = sum(v.crashed for v in crashed)
        kinds = "; ".join(
            f"{v.variant}: " + ", ".join(f"{kind} {n}" for kind, n in sorted(v.crash_kinds.items()))
            for v in crashed
        )
        sample = next((v.crash_sample for v in crashed if v.crash_sample), None)
        lines = [
            f"**{total} of {len(self.outcomes)} runs never ran to a result** (they raised, or "
            f"the model could not be reached), so nothing is recommended: {kinds}.",
        ]
        if sample is not None:
            lines.append(f"For instance: `{sample}`")
        lines += [
            "Fix the cause, then `subagent eval run ... --rerun-failed` makes them again.",
            "",
        ]
        return lines

    def _disagreements(self) -> list[str]:
        names = [v.variant for v in self.variants]
        cases = self.cases()
        split = [c for c in cases if len(set(c.correct.values())) > 1]
        lines = [
            f"Cases: {len(cases)}; every variant right on "
            f"{sum(all(c.correct.values()) for c in cases)}, none on "
            f"{sum(not any(c.correct.values()) for c in cases)}, they disagree on {len(split)}.",
        ]
        if not split:
            return lines
        lines += ["", "| case | " + " | ".join(names) + " |",
                  "| --- |" + " --- |" * len(names)]  # fmt: skip
        for result in split[:CASES_SHOWN]:
            marks = [_mark(result.correct.get(name)) for name in names]
            label = result.case if result.repeat == 0 else f"{result.case} #{result.repeat}"
            lines.append(f"| {label} | " + " | ".join(marks) + " |")
        if len(split) > CASES_SHOWN:
            lines.append(f"\n({len(split) - CASES_SHOWN} more in the JSON report.)")
        return lines

    def to_data(
        self, margin: float = DEFAULT_MARGIN, alpha: float = DEFAULT_ALPHA
    ) -> dict[str, Any]:
        """The report as JSON-ready data (the recommendation by ``margin`` and ``alpha``)."""
        recommendation = self.recommend(margin, alpha)
        return {
            "dataset": self.dataset,
            "measure": self.measure,
            "variants": [v.model_dump(mode="json") for v in self.variants],
            "recommendation": None if recommendation is None else recommendation.model_dump(),
            "cases": [c.model_dump() for c in self.cases()],
        }

    def to_json(
        self, indent: int | None = 2, margin: float = DEFAULT_MARGIN, alpha: float = DEFAULT_ALPHA
    ) -> str:
        """The report as JSON text (see :meth:`to_data`)."""
        return json.dumps(self.to_data(margin, alpha), indent=indent, ensure_ascii=False)

    def to_html(
        self,
        records: str | Path | None = None,
        margin: float = DEFAULT_MARGIN,
        alpha: float = DEFAULT_ALPHA,
    ) -> str:
        """The report as one self-contained HTML page (no script, no external asset).

        The variants' table, the recommendation, the judges' table (pass rate, mean score,
        the judge's own tokens), and per case which variants got it right. With
        ``records`` (the records file the report counts), each run's output and the
        verdicts that failed it, cut at ``OUTPUT_CHARS`` (500) characters. Every text is
        escaped; at most ``HTML_CASES`` (500) cases are listed.
        """
        return report_html(self, COLUMNS, margin, alpha, records)

    def plot(self, path: str | Path) -> Path:
        """Draw success against cost per case, a point per variant, to ``path`` (PNG, SVG...).

        Needs matplotlib (the ``evals`` extra: ``pip install 'subagent-runtime[evals]'``).

        Raises:
            ImportError: matplotlib is not installed (the message says how to get it).
        """
        from subagent.evals._plot import plot_points

        measure = self.measure
        points = []
        for result in self.variants:
            if measure == "cost":
                x = result.cost_per_case or 0.0
            elif measure == "tokens":
                x = (result.prompt_tokens + result.completion_tokens) / max(result.runs, 1)
            else:
                x = result.calls_per_case
            low, high = result.success_interval
            points.append((result.variant, x, result.success_rate, low, high))
        title = f"{self.dataset}: success against cost"
        return plot_points(title, _UNITS[measure], points, Path(path))

    def __str__(self) -> str:
        return self.to_markdown()

    def __repr__(self) -> str:
        return f"Report(dataset={self.dataset!r}, variants={[v.variant for v in self.variants]})"


class Tally:
    """The outcomes a report counts: the last of each case, repetition and variant.

    A later outcome of the same run (an edited case or variant made again) takes the place
    of the earlier one, where the earlier one stood. Each variant's options and model are
    those of its last record.
    """

    def __init__(self) -> None:
        self._latest: dict[tuple[str, int, str], Outcome] = {}
        self._options: dict[str, dict[str, Any]] = {}
        self._models: dict[str, str | None] = {}
        self._dataset: str | None = None

    def add(self, outcome: Outcome, head: Mapping[str, Any]) -> None:
        """Count ``outcome``, whose record's fields besides its Step are ``head``."""
        self._latest[(outcome.case, outcome.repeat, outcome.variant)] = outcome
        self._options[outcome.variant] = head.get("options") or {}
        self._models[outcome.variant] = head.get("model")
        self._dataset = head.get("dataset") or self._dataset

    def report(self, dataset: str) -> Report:
        """The report of what was counted (``dataset``: the name when no record says one)."""
        return Report(self._dataset or dataset, self._latest.values(), self._options,
                      self._models)  # fmt: skip


def _mark(correct: bool | None) -> str:
    return "-" if correct is None else ("right" if correct else "wrong")


def _in_order(outcomes: Iterable[Outcome]) -> list[Outcome]:
    """Outcomes by variant, then case, then repetition, as their evaluations ordered them.

    Variants and cases stand where the evaluation that made them put them (a variant or
    case planned in several places: its first), then in the order first seen.
    """
    listed = list(outcomes)
    variants: dict[str, tuple[int, int]] = {}
    cases: dict[str, tuple[int, int]] = {}
    for outcome in listed:
        variant, case = outcome.variant_index, outcome.case_index
        seen = variants.get(outcome.variant)
        variants[outcome.variant] = (variant, len(variants)) if seen is None else min(
            seen, (variant, seen[1])
        )  # fmt: skip
        seen = cases.get(outcome.case)
        cases[outcome.case] = (case, len(cases)) if seen is None else min(seen, (case, seen[1]))
    return sorted(listed, key=lambda o: (variants[o.variant], cases[o.case], o.repeat))


_UNITS = {"cost": "cost per case", "tokens": "tokens per case", "calls": "LLM calls per case"}
