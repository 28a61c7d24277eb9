"""subagent._stats: the statistics of evaluations and batch summaries, against known values.

Reference values are textbook ones or computed here by brute force (every sign assignment,
every table), never by the code under test.
"""

from __future__ import annotations

import itertools
import math
import random

import pytest

from subagent._stats import (
    EXACT_WILCOXON_LIMIT,
    Option,
    fisher_exact,
    holm,
    holm_adjusted,
    mcnemar,
    percentile,
    recommend,
    wilcoxon_signed_rank,
    wilson,
)


def test_wilson_interval_matches_the_textbook_values() -> None:
    # Newcombe (1998), table I: 81 of 263 -> 0.2553 to 0.3662; 15 of 148 -> 0.0624 to 0.1605.
    low, high = wilson(81, 263)
    assert (round(low, 4), round(high, 4)) == (0.2553, 0.3662)
    low, high = wilson(15, 148)
    assert (round(low, 4), round(high, 4)) == (0.0624, 0.1605)


def test_wilson_interval_stays_within_bounds_at_the_extremes() -> None:
    assert wilson(0, 10)[0] == 0.0 and 0 < wilson(0, 10)[1] < 0.35
    assert wilson(10, 10)[1] == 1.0 and 0.65 < wilson(10, 10)[0] < 1
    assert wilson(0, 0) == (0.0, 1.0)


def _binomial_two_sided(k: int, n: int) -> float:
    tail = sum(math.comb(n, i) for i in range(min(k, n - k) + 1)) / 2**n
    return min(1.0, 2 * tail)


def test_mcnemar_is_the_exact_binomial_on_discordant_pairs() -> None:
    assert mcnemar(0, 0) == 1.0
    assert mcnemar(5, 5) == 1.0
    assert mcnemar(10, 0) == pytest.approx(2 / 2**10)
    assert mcnemar(64, 24) == pytest.approx(_binomial_two_sided(24, 88), rel=1e-12)
    assert mcnemar(3, 12) == mcnemar(12, 3)


def test_mcnemar_stays_exact_for_thousands_of_pairs() -> None:
    assert mcnemar(2600, 2400) == pytest.approx(_binomial_two_sided(2400, 5000), rel=1e-9)
    assert 0 < mcnemar(5000, 4000) < 1e-20


def _fisher_by_enumeration(a: int, n1: int, c: int, n2: int) -> float:
    total = a + c
    probabilities = {
        x: math.comb(n1, x) * math.comb(n2, total - x) / math.comb(n1 + n2, total)
        for x in range(max(0, total - n2), min(n1, total) + 1)
    }
    return sum(p for p in probabilities.values() if p <= probabilities[a] * (1 + 1e-9))


def test_fisher_exact_matches_the_tea_tasting_and_enumeration() -> None:
    assert fisher_exact(3, 4, 1, 4) == pytest.approx(0.4857, abs=1e-4)  # Fisher's lady
    for a, n1, c, n2 in [(7, 10, 2, 12), (0, 5, 5, 5), (30, 60, 45, 70)]:
        assert fisher_exact(a, n1, c, n2) == pytest.approx(_fisher_by_enumeration(a, n1, c, n2))
    assert fisher_exact(1, 0, 1, 3) == 1.0


def _signed_rank_by_enumeration(differences: list[float]) -> float:
    nonzero = [d for d in differences if d]
    magnitudes = sorted(abs(d) for d in nonzero)
    rank = {
        m: (magnitudes.index(m) + 1 + len(magnitudes) - magnitudes[::-1].index(m)) / 2
        for m in magnitudes
    }
    observed = sum(rank[abs(d)] for d in nonzero if d > 0)
    sums = [
        sum(rank[abs(d)] for d, sign in zip(nonzero, signs, strict=True) if sign)
        for signs in itertools.product([False, True], repeat=len(nonzero))
    ]
    below = sum(s <= observed + 1e-9 for s in sums) / len(sums)
    above = sum(s >= observed - 1e-9 for s in sums) / len(sums)
    return min(1.0, 2 * min(below, above))


def test_wilcoxon_exact_matches_every_sign_assignment_ties_included() -> None:
    examples = [
        [1.5, -0.5, 2.0, 3.0, 2.0, -1.0, 4.0, 0.0, 2.5],
        [1, 1, 1, 1, 2, 2, -1, 3],  # heavy ties
        [0.2, 0.4, 0.6, 0.8, 1.0, 1.2],  # all positive: the smallest p for six
    ]
    for differences in examples:
        assert wilcoxon_signed_rank(differences) == pytest.approx(
            _signed_rank_by_enumeration(differences)
        )
    assert wilcoxon_signed_rank([0, 0, 0]) == 1.0
    assert wilcoxon_signed_rank([]) == 1.0


def test_wilcoxon_normal_approximation_is_close_to_exact_where_they_meet() -> None:
    rng = random.Random(4)
    differences = [rng.gauss(0.3, 1) for _ in range(EXACT_WILCOXON_LIMIT)]
    exact = wilcoxon_signed_rank(differences)
    approximate = wilcoxon_signed_rank([*differences, 0.0001])  # one more: the normal form
    assert approximate == pytest.approx(exact, abs=0.02)


def test_holms_adjusted_p_values_reject_exactly_where_holm_does() -> None:
    assert holm_adjusted([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    rng = random.Random(5)
    for _ in range(500):
        p_values = [rng.random() ** 3 for _ in range(rng.randint(1, 8))]
        adjusted = holm_adjusted(p_values)
        assert all(1.0 >= a >= p for a, p in zip(adjusted, p_values, strict=True))
        for alpha in (0.01, 0.05, 0.1):
            assert [a <= alpha for a in adjusted] == holm(p_values, alpha)


def test_holm_rejects_in_order_until_one_is_not() -> None:
    assert holm([0.01, 0.04, 0.03], 0.05) == [True, False, False]  # 0.01 < 0.05/3; 0.03 > 0.05/2
    assert holm([0.001, 0.02, 0.04], 0.05) == [True, True, True]
    assert holm([], 0.05) == []


def test_percentile_is_the_nearest_rank() -> None:
    values = [float(n) for n in range(1, 101)]
    assert (percentile(values, 0.5), percentile(values, 0.95)) == (50.0, 95.0)
    assert percentile([], 0.5) == 0.0


def _always(p: float) -> object:
    return lambda best, other: p


def test_recommend_takes_the_cheapest_within_the_margin_when_the_test_sees_no_difference() -> None:
    options = [Option("r0", 50, 100, 1.0), Option("r1", 71, 100, 1.3), Option("r2", 72, 100, 1.5)]
    choice = recommend(options, _always(0.48), margin=0.05, alpha=0.05, unit="calls/case")  # type: ignore[arg-type]
    assert choice is not None and choice.chosen.label == "r1" and choice.best.label == "r2"
    assert choice.reason == (
        "r1: 71% [61-79], 1.3 calls/case; r2 adds 0.2 calls and no significant success "
        "(+1 points, p=0.48)"
    )


def test_recommend_keeps_the_best_when_the_cheaper_one_is_significantly_worse() -> None:
    options = [Option("r0", 69, 100, 1.0), Option("r1", 72, 100, 1.3)]
    choice = recommend(options, _always(0.01), margin=0.05, alpha=0.05, unit="calls/case")  # type: ignore[arg-type]
    assert choice is not None and choice.chosen.label == "r1"
    assert choice.reason.endswith("r0 saves 0.3 calls but loses 3 points, significantly (p=0.01)")


def test_recommend_needs_two_options_that_ran() -> None:
    assert (
        recommend(
            [Option("a", 1, 2, 1.0)],
            _always(1.0),
            margin=0.05,
            alpha=0.05,  # type: ignore[arg-type]
            unit="calls/case",
        )
        is None
    )
