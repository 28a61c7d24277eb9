"""What a batch came to: counts by outcome, failure and stop reason, turns and tokens.

:func:`summarize` reads any Steps (of a batch, a file of stored Steps, an evaluation) and
returns a :class:`BatchSummary`: data for code (a pydantic model, JSON-ready) and a table
for people (``print(summary)``), with hints where the stop reasons suggest a setting to
change. When the runs had different budgets (``max_turns`` / ``return_retries``), it
summarises each budget apart and recommends the cheapest whose success is within a margin
of the best's (Fisher's exact test: runs of different budgets are not paired).
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, Field

from subagent._stats import Option, fisher_exact, recommend, wilson
from subagent.llm import StopReason, Usage
from subagent.records import FailReason, Step, TurnType

__all__ = ["RECOMMENDATION_MARGIN", "BatchSummary", "BudgetSummary", "summarize"]

RECOMMENDATION_MARGIN = 0.05
"""The loss of success rate a cheaper budget may have and still be recommended (5 points);
the test against the best is Fisher's exact, at 0.05."""


class BudgetSummary(BaseModel):
    """The runs of one budget, when a set of runs had several.

    Attributes:
        max_turns: The work budget.
        return_retries: The correction budget.
        runs: Its runs.
        done: Those that produced a valid output.
        success_interval: The Wilson 95% interval of ``done / runs``.
        calls_per_run: LLM calls (turns) per run.
        tokens_per_run: Tokens (prompt and completion, nested agents included) per run.
    """

    max_turns: int
    return_retries: int
    runs: int = 0
    done: int = 0
    success_interval: tuple[float, float] = (0.0, 1.0)
    calls_per_run: float = 0.0
    tokens_per_run: float = 0.0

    @property
    def success_rate(self) -> float:
        """Done runs over all runs (0.0 for none)."""
        return self.done / self.runs if self.runs else 0.0


class BatchSummary(BaseModel):
    """What a set of runs came to.

    Attributes:
        runs: How many runs.
        done: Runs that produced a valid output.
        failed: Runs that failed.
        paused: Runs that paused for approval of tool calls (neither done nor failed:
            each Step's ``state`` resumes it).
        failure_reasons: Failed runs by failure reason (``budget_exhausted``...).
        error_kinds: ``llm_error`` runs by error kind (``rate_limit``...).
        stop_reasons: Replies by stop reason, over every turn of every run.
        retryable: Failed runs that running again could help.
        turns: Turns taken in all (one LLM call each).
        turns_by_type: Turns by type (``normal``, ``must_return``, ``retry``).
        calls_per_success: Turns per successful run (``None`` without one).
        tokens_work: Tokens of work turns.
        tokens_correction: Tokens of correction turns.
        tokens_nested: Tokens of agents run as tools.
        tokens_total: All tokens.
        transport_retries: Failed calls repeated inside turns.
        corrected_runs: Runs in which a correction turn ran (their final work turn's answer
            was invalid).
        salvaged: Of those, the runs that ended done: what the correction budget bought.
        repeated_corrections: Correction turns whose reply repeated a reply the run refused
            before, word for word (a correction that changed nothing).
        duration_p50_s: The median run's wall time.
        duration_p95_s: The 95th percentile run's wall time.
        hints: What the figures suggest changing, if anything.
        budgets: One summary per budget, when the runs had several (else empty).
        recommendation: With several budgets: the cheapest (by tokens per run, else calls)
            whose success is within :data:`RECOMMENDATION_MARGIN` of the best and not
            significantly below it, and why, in one line.
    """

    runs: int = 0
    done: int = 0
    failed: int = 0
    paused: int = 0
    failure_reasons: dict[str, int] = Field(default_factory=dict)
    error_kinds: dict[str, int] = Field(default_factory=dict)
    stop_reasons: dict[str, int] = Field(default_factory=dict)
    retryable: int = 0
    turns: int = 0
    turns_by_type: dict[str, int] = Field(default_factory=dict)
    calls_per_success: float | None = None
    tokens_work: Usage = Field(default_factory=Usage)
    tokens_correction: Usage = Field(default_factory=Usage)
    tokens_nested: Usage = Field(default_factory=Usage)
    tokens_total: Usage = Field(default_factory=Usage)
    transport_retries: int = 0
    corrected_runs: int = 0
    salvaged: int = 0
    repeated_corrections: int = 0
    duration_p50_s: float = 0.0
    duration_p95_s: float = 0.0
    hints: list[str] = Field(default_factory=list)
    budgets: list[BudgetSummary] = Field(default_factory=list)
    recommendation: str | None = None

    @property
    def success_rate(self) -> float:
        """Done runs over all runs (0.0 for none)."""
        return self.done / self.runs if self.runs else 0.0

    def table(self) -> str:
        """The summary as an aligned text table."""
        rate = f"{self.success_rate:.1%}"
        rows: list[tuple[str, str]] = [
            ("runs", f"{self.runs}"),
            ("done", f"{self.done} ({rate})"),
            (
                "failed",
                f"{self.failed}" + (f" ({self.retryable} retryable)" if self.failed else ""),
            ),
        ]
        if self.paused:
            rows.append(("paused", f"{self.paused} (awaiting approval)"))
        for reason, count in _by_count(self.failure_reasons):
            rows.append((f"  {reason}", f"{count}"))
            if reason == FailReason.LLM_ERROR.value:  # its kinds, under it
                rows += [(f"    {kind}", f"{n}") for kind, n in _by_count(self.error_kinds)]
        per_success = "-" if self.calls_per_success is None else f"{self.calls_per_success:.2f}"
        types = ", ".join(f"{kind} {count}" for kind, count in self.turns_by_type.items())
        rows += [
            ("turns", f"{self.turns}" + (f" ({types})" if types else "")),
            ("calls per success", per_success),
            ("stop reasons", ", ".join(f"{r} {c}" for r, c in _by_count(self.stop_reasons)) or "-"),
            ("tokens work", _tokens(self.tokens_work)),
            ("tokens correction", _tokens(self.tokens_correction)),
            ("tokens nested", _tokens(self.tokens_nested)),
            ("tokens total", _tokens(self.tokens_total)),
            ("transport retries", f"{self.transport_retries}"),
            ("corrections", _corrections(self)),
            ("run time p50 / p95", f"{self.duration_p50_s:.1f} s / {self.duration_p95_s:.1f} s"),
        ]
        width = max(len(label) for label, _ in rows)
        lines = [f"{label:<{width}}  {value}" for label, value in rows]
        if self.budgets:
            lines.append("by budget:")
        for budget in self.budgets:
            low, high = budget.success_interval
            lines.append(
                f"  max_turns={budget.max_turns}, return_retries={budget.return_retries}: "
                f"{budget.done}/{budget.runs} done ({budget.success_rate:.0%} "
                f"[{100 * low:.0f}-{100 * high:.0f}]), {budget.calls_per_run:.2f} calls/run"
            )
        if self.recommendation is not None:
            lines.append(f"recommended: {self.recommendation}")
        lines += [f"hint: {hint}" for hint in self.hints]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def summarize(steps: Iterable[Step[Any]]) -> BatchSummary:
    """Count what ``steps`` came to (see :class:`BatchSummary`)."""
    summary = BatchSummary()
    failure_reasons: Counter[str] = Counter()
    error_kinds: Counter[str] = Counter()
    stop_reasons: Counter[str] = Counter()
    turn_types: Counter[str] = Counter()
    work = [0, 0, 0]
    correction = [0, 0, 0]
    nested = [0, 0, 0]
    durations: list[float] = []
    # (max_turns, return_retries): [runs, done, calls, tokens]
    budgets: dict[tuple[int, int], list[int]] = {}
    for step in steps:
        summary.runs += 1
        counts = budgets.setdefault((step.max_turns, step.return_retries), [0, 0, 0, 0])
        counts[0] += 1
        counts[1] += step.ok
        counts[2] += len(step.turns)
        counts[3] += step.usage.total.total_tokens
        durations.append(step.duration_s)
        failure = step.failure
        if step.state is not None:
            summary.paused += 1
        elif failure is None:
            summary.done += 1
        else:
            summary.failed += 1
            failure_reasons[failure.reason.value] += 1
            if failure.reason is FailReason.LLM_ERROR and failure.error_kind is not None:
                error_kinds[failure.error_kind.value] += 1
            summary.retryable += step.retryable
        stop_reasons.update(step.stop_reasons)
        summary.turns += len(step.turns)
        turn_types.update(turn.type.value for turn in step.turns)
        corrections = [turn for turn in step.turns if turn.type is TurnType.RETRY]
        if corrections:
            summary.corrected_runs += 1
            summary.salvaged += step.ok
            summary.repeated_corrections += sum(turn.repeated for turn in corrections)
        usage = step.usage
        _add(work, usage.work)
        _add(correction, usage.correction)
        _add(nested, usage.nested)
        summary.transport_retries += usage.transport_retries
    summary.failure_reasons = dict(failure_reasons)
    summary.error_kinds = dict(error_kinds)
    summary.stop_reasons = dict(stop_reasons)
    summary.turns_by_type = {kind: turn_types[kind] for kind in ("normal", "must_return", "retry")
                             if turn_types[kind]}  # fmt: skip
    summary.calls_per_success = summary.turns / summary.done if summary.done else None
    summary.tokens_work = Usage(input_tokens=work[0], output_tokens=work[1], unreported=work[2])
    summary.tokens_correction = Usage(
        input_tokens=correction[0], output_tokens=correction[1], unreported=correction[2]
    )
    summary.tokens_nested = Usage(
        input_tokens=nested[0], output_tokens=nested[1], unreported=nested[2]
    )
    summary.tokens_total = summary.tokens_work + summary.tokens_correction + summary.tokens_nested
    if durations:
        summary.duration_p50_s = statistics.median(durations)
        summary.duration_p95_s = _percentile(durations, 0.95)
    summary.hints = _hints(summary)
    if len(budgets) > 1:
        summary.budgets = [
            BudgetSummary(max_turns=max_turns, return_retries=retries, runs=runs, done=done,
                          success_interval=wilson(done, runs), calls_per_run=calls / runs,
                          tokens_per_run=tokens / runs)
            for (max_turns, retries), (runs, done, calls, tokens) in sorted(budgets.items())
        ]  # fmt: skip
        summary.recommendation = _recommendation(summary.budgets)
    return summary


def _corrections(summary: BatchSummary) -> str:
    """``3 runs, 2 salvaged (67%), 1 repeat of 4 correction turns`` (or ``-``)."""
    runs = summary.corrected_runs
    if not runs:
        return "-"
    turns = summary.turns_by_type.get("retry", 0)
    return (
        f"{runs} run(s), {summary.salvaged} salvaged ({summary.salvaged / runs:.0%}), "
        f"{summary.repeated_corrections} repeat(s) of {turns} correction turn(s)"
    )


def _recommendation(budgets: list[BudgetSummary]) -> str | None:
    """The cheapest budget whose success is within the margin of the best, and why."""
    by_tokens = any(budget.tokens_per_run for budget in budgets)
    turns = {budget.max_turns for budget in budgets}
    retries = {budget.return_retries for budget in budgets}

    def label(budget: BudgetSummary) -> str:
        parts = []
        if len(turns) > 1:
            parts.append(f"max_turns={budget.max_turns}")
        if len(retries) > 1:
            parts.append(f"return_retries={budget.return_retries}")
        return ", ".join(parts)

    options = [
        Option(label(budget), budget.done, budget.runs,
               budget.tokens_per_run if by_tokens else budget.calls_per_run)
        for budget in budgets
    ]  # fmt: skip

    def p_value(best: Option, other: Option) -> float:
        return fisher_exact(best.successes, best.runs, other.successes, other.runs)

    choice = recommend(options, p_value,
                       margin=RECOMMENDATION_MARGIN, alpha=0.05,
                       unit="tokens/run" if by_tokens else "calls/run")  # fmt: skip
    return None if choice is None else choice.reason


def _add(sums: list[int], usage: Usage) -> None:
    sums[0] += usage.input_tokens
    sums[1] += usage.output_tokens
    sums[2] += usage.unreported


def _tokens(usage: Usage) -> str:
    counts = f"{usage.total_tokens} (in {usage.input_tokens}, out {usage.output_tokens})"
    if usage.known:
        return counts
    calls = "call" if usage.unreported == 1 else "calls"
    return f"at least {counts}; {usage.unreported} {calls} did not report usage"


def _by_count(counts: dict[str, int]) -> list[tuple[str, int]]:
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))]


def _hints(summary: BatchSummary) -> list[str]:
    hints: list[str] = []
    cut = summary.stop_reasons.get(StopReason.LENGTH.value, 0)
    if cut:
        hints.append(f"{cut} replies hit max_tokens: raise max_tokens, or ask for shorter answers")
    exhausted = summary.failure_reasons.get("budget_exhausted", 0)
    if exhausted and summary.runs and exhausted / summary.runs >= 0.1:
        hints.append(
            f"{exhausted} runs exhausted their budgets: more return_retries (or max_turns) "
            f"may buy them"
        )
    if summary.retryable:
        hints.append(f"{summary.retryable} failed runs are retryable: run them again")
    if summary.error_kinds.get("context_length", 0):
        hints.append("requests over the context window: shorten the context or the tool results")
    return hints
