"""Statistics over run outcomes: intervals, exact tests, and choosing a cheap setting.

Small and dependency-free on purpose (no scipy): the library's users get the figures of an
evaluation (``subagent.evals``) and of a batch (``subagent.summarize``) from the same
functions, exact where the data are small and the exact computation is cheap.

- :func:`wilson`: the Wilson score interval of a success rate.
- :func:`mcnemar`: McNemar's exact test on paired binary outcomes (the exact binomial).
- :func:`fisher_exact`: Fisher's exact test on two independent groups' successes.
- :func:`wilcoxon_signed_rank`: the signed-rank test on paired differences (exact for
  small samples, the normal approximation with tie correction beyond).
- :func:`holm`: Holm's step-down adjustment of several p-values tested together.
- :func:`recommend`: the cheapest option whose success is within a margin of the best.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = [
    "EXACT_WILCOXON_LIMIT",
    "Choice",
    "Option",
    "fisher_exact",
    "holm",
    "mcnemar",
    "percentile",
    "recommend",
    "wilcoxon_signed_rank",
    "wilson",
]

_Z95 = 1.959963984540054  # the 97.5th percentile of the standard normal

EXACT_WILCOXON_LIMIT = 50
"""Up to this many non-zero differences the signed-rank test counts its exact distribution;
beyond, it uses the normal approximation (corrected for ties and continuity)."""


def wilson(successes: int, runs: int, z: float = _Z95) -> tuple[float, float]:
    """The Wilson score interval of ``successes`` out of ``runs`` (95% by default).

    Unlike the normal ("Wald") interval it stays within [0, 1] and keeps its coverage near
    0% and 100% and for small samples. No runs gives ``(0.0, 1.0)``: nothing is known.
    """
    if runs <= 0:
        return (0.0, 1.0)
    rate = successes / runs
    z2 = z * z
    centre = (rate + z2 / (2 * runs)) / (1 + z2 / runs)
    half = z * math.sqrt(rate * (1 - rate) / runs + z2 / (4 * runs * runs)) / (1 + z2 / runs)
    low = 0.0 if successes <= 0 else max(0.0, centre - half)
    high = 1.0 if successes >= runs else min(1.0, centre + half)
    return (low, high)


def _binomial_tail(k: int, n: int) -> float:
    """P(X <= k) for X ~ Binomial(n, 1/2), exactly (integer arithmetic), as a float."""
    term = 1  # C(n, 0)
    total = 0
    for i in range(k + 1):
        total += term
        term = term * (n - i) // (i + 1)
    return total / (1 << n)  # int / int: correctly rounded, even for huge n


def mcnemar(only_first: int, only_second: int) -> float:
    """McNemar's exact test: the two-sided p-value of paired binary outcomes.

    Args:
        only_first: Pairs where only the first member succeeded.
        only_second: Pairs where only the second member succeeded.

    Pairs where both or neither succeeded say nothing about a difference. Under no
    difference each discordant pair is a fair coin, so the count is Binomial(n, 1/2); the
    p-value doubles the smaller tail (capped at 1). No discordant pair gives 1.0.
    """
    n = only_first + only_second
    if n == 0:
        return 1.0
    return min(1.0, 2 * _binomial_tail(min(only_first, only_second), n))


def _log_choose(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def fisher_exact(a_successes: int, a_runs: int, b_successes: int, b_runs: int) -> float:
    """Fisher's exact test: the two-sided p-value that two groups succeed equally often.

    For independent groups (runs that are not paired). The p-value sums the
    probabilities, given the margins, of every table at most as likely as the one
    observed. Either group empty gives 1.0.
    """
    if a_runs <= 0 or b_runs <= 0:
        return 1.0
    total = a_runs + b_runs
    successes = a_successes + b_successes
    low, high = max(0, successes - b_runs), min(a_runs, successes)
    denominator = _log_choose(total, successes)

    def log_p(x: int) -> float:
        return _log_choose(a_runs, x) + _log_choose(b_runs, successes - x) - denominator

    observed = log_p(a_successes)
    tolerance = 1e-7  # tables as likely as the observed one, within rounding, count
    p = sum(math.exp(lp) for x in range(low, high + 1) if (lp := log_p(x)) <= observed + tolerance)
    return min(1.0, p)


def _ranks(values: Sequence[float]) -> list[float]:
    """Ranks from 1 of ``values``, ties sharing their average rank."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        shared = (start + end) / 2 + 1
        for position in range(start, end + 1):
            ranks[order[position]] = shared
        start = end + 1
    return ranks


def wilcoxon_signed_rank(differences: Sequence[float]) -> float:
    """The Wilcoxon signed-rank test: the two-sided p-value of paired differences.

    Whether the differences centre on zero. Zero differences are dropped (Wilcoxon's own
    treatment); ties share their average rank.
    Up to :data:`EXACT_WILCOXON_LIMIT` non-zero differences the p-value comes from the
    exact distribution of the positive rank sum (counted over every assignment of signs);
    beyond, from the normal approximation with the tie correction of the variance and a
    continuity correction. No non-zero difference gives 1.0.
    """
    nonzero = [d for d in differences if d != 0]
    n = len(nonzero)
    if n == 0:
        return 1.0
    ranks = _ranks([abs(d) for d in nonzero])
    positive = sum(rank for rank, d in zip(ranks, nonzero, strict=True) if d > 0)
    if n <= EXACT_WILCOXON_LIMIT:
        return _exact_signed_rank(ranks, positive)
    mean = n * (n + 1) / 4
    ties: dict[float, int] = {}
    for rank in ranks:
        ties[rank] = ties.get(rank, 0) + 1
    variance = n * (n + 1) * (2 * n + 1) / 24 - sum(t**3 - t for t in ties.values()) / 48
    if variance <= 0:
        return 1.0
    deviation = max(0.0, abs(positive - mean) - 0.5)
    return min(1.0, math.erfc(deviation / math.sqrt(variance) / math.sqrt(2)))


def _exact_signed_rank(ranks: Sequence[float], positive: float) -> float:
    # Doubled ranks are integers even with ties (average ranks are halves).
    doubled = [round(2 * rank) for rank in ranks]
    counts = [0] * (sum(doubled) + 1)  # counts[s]: sign assignments whose doubled sum is s
    counts[0] = 1
    reach = 0
    for rank in doubled:
        reach += rank
        for total in range(reach, rank - 1, -1):
            counts[total] += counts[total - rank]
    observed = round(2 * positive)
    below = sum(counts[: observed + 1])
    above = sum(counts[observed:])
    return min(1.0, 2 * min(below, above) / (1 << len(doubled)))


def holm(p_values: Sequence[float], alpha: float) -> list[bool]:
    """Which of several hypotheses tested together are rejected, by Holm's method.

    Holm's step-down procedure keeps the chance of any false rejection among them at most
    ``alpha`` (like Bonferroni's, with more power): the smallest p-value is compared with
    ``alpha / m``, the next with ``alpha / (m - 1)``, and so on until one is not rejected.
    """
    order = sorted(range(len(p_values)), key=p_values.__getitem__)
    rejected = [False] * len(p_values)
    for position, index in enumerate(order):
        if p_values[index] > alpha / (len(p_values) - position):
            break
        rejected[index] = True
    return rejected


def holm_adjusted(p_values: Sequence[float]) -> list[float]:
    """Holm's adjusted p-values: each rejected at ``alpha`` exactly when :func:`holm` does.

    The k-th smallest p-value times ``m - k + 1``, never below an earlier one's, at most 1.
    """
    order = sorted(range(len(p_values)), key=p_values.__getitem__)
    adjusted = [1.0] * len(p_values)
    running = 0.0
    for position, index in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - position) * p_values[index]))
        adjusted[index] = running
    return adjusted


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile of ``values`` (0.0 for none)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))]


@dataclass(frozen=True, slots=True)
class Option:
    """One setting to choose among: its label, its success and its cost per run.

    Attributes:
        label: How the setting is named (``return_retries=1``).
        successes: Its successful runs.
        runs: Its runs.
        cost: What one run costs on average, in ``unit``.
    """

    label: str
    successes: int
    runs: int
    cost: float

    @property
    def rate(self) -> float:
        """Successes over runs (0.0 for none)."""
        return self.successes / self.runs if self.runs else 0.0

    def described(self, unit: str) -> str:
        """``label: 71% [64-77], 1.3 calls/case``."""
        low, high = wilson(self.successes, self.runs)
        return (
            f"{self.label}: {self.rate:.0%} [{100 * low:.0f}-{100 * high:.0f}], "
            f"{_amount(self.cost)} {unit}"
        )


@dataclass(frozen=True, slots=True)
class Choice:
    """The option recommended, and why in one line.

    Attributes:
        chosen: The cheapest option whose success is within the margin of the best.
        best: The option with the best success rate.
        reason: One line: the chosen option's figures and what the alternative adds or
            loses.
    """

    chosen: Option
    best: Option
    reason: str


def _amount(value: float) -> str:
    return f"{value:.2g}" if 0 < abs(value) < 0.1 else f"{value:.1f}"


def recommend(
    options: Sequence[Option],
    p_value: Callable[[Option, Option], float],
    *,
    margin: float,
    alpha: float,
    unit: str,
) -> Choice | None:
    """The cheapest option whose success is within ``margin`` of the best.

    An option qualifies when its success rate is at most ``margin`` below the best one's
    and the test (``p_value(best, option)``) finds no significant difference at
    ``alpha``. Ties in cost go to the more successful, then to the first given. ``None``
    with fewer than two options, or none that ran.
    """
    ran = [option for option in options if option.runs]
    if len(ran) < 2:
        return None
    best = max(ran, key=lambda option: (option.rate, -option.cost))
    by_cost = sorted(ran, key=lambda option: (option.cost, -option.rate))
    tests: dict[str, float] = {}

    def test(option: Option) -> float:
        if option.label not in tests:
            tests[option.label] = 1.0 if option is best else p_value(best, option)
        return tests[option.label]

    chosen = next(
        option
        for option in by_cost
        if option is best or (best.rate - option.rate <= margin and test(option) >= alpha)
    )
    head = chosen.described(unit)
    if chosen is not best:
        extra = best.cost - chosen.cost
        more = f"adds {_amount(extra)} {unit.split('/')[0]}" if extra > 0 else "costs the same"
        gain = 100 * (best.rate - chosen.rate)
        return Choice(chosen, best, f"{head}; {best.label} {more} and no significant success "
                                    f"(+{gain:.0f} points, p={test(chosen):.2g})")  # fmt: skip
    cheaper = [option for option in by_cost if option.cost < chosen.cost]
    if not cheaper:
        return Choice(chosen, best, f"{head}; the most successful and the cheapest")
    nearest = cheaper[-1]
    loss = 100 * (best.rate - nearest.rate)
    why = (
        f"{loss:.0f} points (p={test(nearest):.2g})"
        if loss > 100 * margin
        else f"{loss:.0f} points, significantly (p={test(nearest):.2g})"
    )
    saving = _amount(chosen.cost - nearest.cost)
    return Choice(chosen, best, f"{head}; {nearest.label} saves {saving} {unit.split('/')[0]} "
                                f"but loses {why}")  # fmt: skip
