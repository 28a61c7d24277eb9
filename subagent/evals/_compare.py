"""Paired comparisons of outcomes: against a baseline, and between the variants of a report.

Two evaluations are compared case by case: the same case (its name, the digest of its
inputs, its repetition) in both. Success and salvage are binary outcomes of one case under
two settings: McNemar's exact test reads the cases where the two disagree. Cost is a paired
number: the Wilcoxon signed-rank test reads the per-case differences. The tests of one
comparison are adjusted together (Holm), so the chance of flagging anything in an A/A run
stays at most ``alpha`` however many variants and metrics are compared.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Literal

from pydantic import BaseModel

from subagent._stats import Option, holm_adjusted, mcnemar, recommend, wilcoxon_signed_rank
from subagent.evals._outcomes import Outcome

__all__ = [
    "Change",
    "Comparison",
    "Measure",
    "Recommendation",
    "by_variant",
    "compare_outcomes",
    "measure_of",
    "recommend_variant",
]

Measure = Literal["cost", "tokens", "calls"]
_UNITS: dict[str, str] = {"cost": "cost/case", "tokens": "tokens/case", "calls": "calls/case"}
_PairKey = tuple[str, str, int]


def by_variant(outcomes: Iterable[Outcome]) -> dict[str, list[Outcome]]:
    """The outcomes grouped by variant, in the order the variants first appear."""
    grouped: dict[str, list[Outcome]] = {}
    for outcome in outcomes:
        grouped.setdefault(outcome.variant, []).append(outcome)
    return grouped


def measure_of(outcomes: Iterable[Outcome]) -> Measure:
    """What cost is counted in.

    The cost when every run was priced, else tokens when any run reported some, else calls.
    """
    priced = True
    tokens = False
    for outcome in outcomes:
        priced = priced and outcome.cost is not None
        tokens = tokens or outcome.tokens > 0
    if priced:
        return "cost"
    return "tokens" if tokens else "calls"


def _amount(outcome: Outcome, measure: Measure) -> float:
    if measure == "cost":
        return outcome.cost or 0.0
    return float(outcome.tokens if measure == "tokens" else outcome.calls)


def _pairs(first: Sequence[Outcome], second: Sequence[Outcome]) -> list[tuple[Outcome, Outcome]]:
    """The outcomes of the same cases (name, digest, repetition), in ``second``'s order."""
    keyed: dict[_PairKey, Outcome] = {(o.case, o.case_digest, o.repeat): o for o in first}
    return [
        (keyed[key], outcome)
        for outcome in second
        if (key := (outcome.case, outcome.case_digest, outcome.repeat)) in keyed
    ]


def _discordant(
    pairs: Sequence[tuple[Outcome, Outcome]], success: Callable[[Outcome], bool]
) -> tuple[int, int]:
    only_first = only_second = 0
    for first, second in pairs:
        a, b = success(first), success(second)
        only_first += a and not b
        only_second += b and not a
    return only_first, only_second


class Change(BaseModel):
    """One metric of one variant, baseline against current, on the paired cases.

    Attributes:
        variant: The variant (``baseline -> current`` when the names differ).
        metric: ``success``, ``salvage`` (of the cases corrected in both) or ``cost``
            (in ``measure``'s unit per case).
        pairs: The cases paired.
        baseline: The baseline's rate (success, salvage) or mean per case (cost).
        current: The current evaluation's.
        p_value: The test's two-sided p-value (McNemar exact; Wilcoxon signed-rank for
            cost), before adjustment.
        p_adjusted: The same after Holm's adjustment over every test of the comparison:
            the p-value the verdict is decided on.
        significant: Whether ``p_adjusted`` is at most ``alpha``.
        direction: ``better``, ``worse`` or ``same``.
        over_max_drop: A success rate that fell by more than the comparison's
            ``max_drop``: a regression however few the cases (a practical threshold).
    """

    variant: str
    metric: Literal["success", "salvage", "cost"]
    pairs: int
    baseline: float | None
    current: float | None
    p_value: float
    p_adjusted: float = 1.0
    significant: bool = False
    direction: Literal["better", "worse", "same"] = "same"
    over_max_drop: bool = False

    @property
    def regression(self) -> bool:
        """A significant change for the worse, or a success drop over ``max_drop``."""
        return (self.significant and self.direction == "worse") or self.over_max_drop

    def line(self, unit: str) -> str:
        """The change as a table row of Markdown."""

        def shown(value: float | None) -> str:
            if value is None:
                return "-"
            return f"{value:.1%}" if self.metric != "cost" else f"{value:.4g}"

        flag = {"better": "better", "worse": "**worse**", "same": "same"}[self.direction]
        verdict = f"{flag} (significant)" if self.significant else "no significant change"
        if self.over_max_drop:
            verdict = (
                "**worse** (significant, over the maximum drop)"
                if self.significant
                else ("**worse** (over the maximum drop)")
            )
        metric = f"cost ({unit})" if self.metric == "cost" else self.metric
        return (
            f"| {self.variant} | {metric} | {self.pairs} | {shown(self.baseline)} | "
            f"{shown(self.current)} | {self.p_adjusted:.3g} | {self.p_value:.3g} | {verdict} |"
        )


class Comparison(BaseModel):
    """An evaluation against a baseline: each variant's success, salvage and cost.

    Attributes:
        alpha: The significance level (for the whole comparison, by Holm's adjustment).
        measure: What cost was counted in (``cost``, ``tokens`` or ``calls``).
        changes: Every metric of every variant compared.
        unpaired: Variants of one side with no counterpart in the other.
        max_drop: The largest fall of a success rate taken as no regression, whatever the
            test says (0.1: ten points); ``None``: the tests alone decide.
    """

    alpha: float
    measure: Measure
    changes: list[Change]
    unpaired: list[str] = []
    max_drop: float | None = None

    @property
    def regressions(self) -> list[Change]:
        """The significant changes for the worse."""
        return [change for change in self.changes if change.regression]

    @property
    def paired(self) -> int:
        """How many cases were compared (both evaluations ran them), over every variant."""
        return sum(change.pairs for change in self.changes if change.metric == "success")

    @property
    def regressed(self) -> bool:
        """Whether any metric of any variant got significantly worse."""
        return bool(self.regressions)

    def to_markdown(self) -> str:
        """The comparison as a Markdown table, with a verdict line."""
        unit = _UNITS[self.measure]
        lines = [
            "| variant | metric | pairs | baseline | current | p (Holm) | p (raw) | verdict |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
            *(change.line(unit) for change in self.changes),
            "",
        ]
        if not self.paired:
            lines.append(
                "Nothing compared: no case of the baseline pairs with a case of these records "
                "(the same case and variant, by name and digest); cases edited since the "
                "baseline do not pair."
            )
            return "\n".join(lines)
        regressions = self.regressions
        kind, rule = "Significant regression", f"alpha {self.alpha:g}, Holm"
        if self.max_drop is not None:
            kind, rule = "Regression", f"{rule}; or success down more than {self.max_drop:.0%}"
        if regressions:
            named = ", ".join(f"{c.variant} {c.metric}" for c in regressions)
            lines.append(f"{kind} ({rule}): {named}.")
        else:
            lines.append(f"No {kind.lower()} ({rule}).")
        if self.unpaired:
            lines.append(f"Not compared (in one evaluation only): {', '.join(self.unpaired)}.")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.to_markdown()


def _rate(values: Iterable[bool]) -> float | None:
    listed = list(values)
    return sum(listed) / len(listed) if listed else None


def _direction(baseline: float | None, current: float | None, higher_is_better: bool) -> str:
    if baseline is None or current is None or baseline == current:
        return "same"
    return "better" if (current > baseline) == higher_is_better else "worse"


def compare_outcomes(
    current: Mapping[str, Sequence[Outcome]],
    baseline: Mapping[str, Sequence[Outcome]],
    *,
    alpha: float,
    max_drop: float | None = None,
) -> Comparison:
    """Compare each variant of ``current`` with the same variant of ``baseline``.

    Variants pair by name; two evaluations of one variant each pair whatever their names.
    ``max_drop``: a success rate that falls by more is a regression whatever the test.
    """
    names = [name for name in current if name in baseline]
    matched = [(name, name, name) for name in names]
    if not matched and len(current) == 1 and len(baseline) == 1:
        (now,), (before,) = current, baseline
        matched = [(f"{before} -> {now}", before, now)]
    unpaired = [name for name in [*baseline, *current]
                if not any(name in (before, now) for _, before, now in matched)]  # fmt: skip
    measure = measure_of(o for group in (*current.values(), *baseline.values()) for o in group)
    changes: list[Change] = []
    for label, before, now in matched:
        pairs = _pairs(baseline[before], current[now])
        only_before, only_now = _discordant(pairs, lambda o: o.correct)
        changes.append(Change(
            variant=label, metric="success", pairs=len(pairs),
            baseline=_rate(a.correct for a, _ in pairs), current=_rate(b.correct for _, b in pairs),
            p_value=mcnemar(only_before, only_now),
        ))  # fmt: skip
        corrected = [(a, b) for a, b in pairs if a.corrected and b.corrected]
        only_before, only_now = _discordant(corrected, lambda o: o.correct)
        changes.append(Change(
            variant=label, metric="salvage", pairs=len(corrected),
            baseline=_rate(a.correct for a, _ in corrected),
            current=_rate(b.correct for _, b in corrected),
            p_value=mcnemar(only_before, only_now),
        ))  # fmt: skip
        amounts = [(_amount(a, measure), _amount(b, measure)) for a, b in pairs]
        changes.append(Change(
            variant=label, metric="cost", pairs=len(pairs),
            baseline=sum(a for a, _ in amounts) / len(amounts) if amounts else None,
            current=sum(b for _, b in amounts) / len(amounts) if amounts else None,
            p_value=wilcoxon_signed_rank([b - a for a, b in amounts]),
        ))  # fmt: skip
    adjusted = holm_adjusted([change.p_value for change in changes])
    for change, p_adjusted in zip(changes, adjusted, strict=True):
        change.direction = _direction(change.baseline, change.current,  # type: ignore[assignment]
                                      higher_is_better=change.metric != "cost")  # fmt: skip
        change.p_adjusted = p_adjusted
        change.significant = p_adjusted <= alpha and change.direction != "same"
        change.over_max_drop = (
            max_drop is not None and change.metric == "success"
            and change.baseline is not None and change.current is not None
            and change.baseline - change.current > max_drop + 1e-12
        )  # fmt: skip
    return Comparison(alpha=alpha, measure=measure, changes=changes, unpaired=unpaired,
                      max_drop=max_drop)  # fmt: skip


class Recommendation(BaseModel):
    """The variant to use: the cheapest whose success is within the margin of the best.

    Attributes:
        variant: The variant recommended.
        best: The variant with the best success rate.
        reason: Why, in one line.
        margin: The largest loss of success rate accepted (0.05: five points).
        alpha: The significance level of the paired test against the best.
        measure: What "cheapest" counted (``cost``, ``tokens`` or ``calls`` per case).
    """

    variant: str
    best: str
    reason: str
    margin: float
    alpha: float
    measure: Measure

    def __str__(self) -> str:
        return f"recommended: {self.reason}"


def recommend_variant(
    grouped: Mapping[str, Sequence[Outcome]], *, margin: float, alpha: float
) -> Recommendation | None:
    """The cheapest variant whose success is within ``margin`` of the best.

    By a paired test: McNemar exact on the cases both ran. ``None`` with fewer than two
    variants.
    """
    measure = measure_of(o for group in grouped.values() for o in group)
    options = [
        Option(name, sum(o.correct for o in group), len(group),
               sum(_amount(o, measure) for o in group) / len(group) if group else 0.0)
        for name, group in grouped.items()
    ]  # fmt: skip

    def p_value(best: Option, other: Option) -> float:
        pairs = _pairs(grouped[best.label], grouped[other.label])
        return mcnemar(*_discordant(pairs, lambda o: o.correct))

    choice = recommend(options, p_value, margin=margin, alpha=alpha, unit=_UNITS[measure])
    if choice is None:
        return None
    return Recommendation(variant=choice.chosen.label, best=choice.best.label,
                          reason=choice.reason, margin=margin, alpha=alpha,
                          measure=measure)  # fmt: skip
