"""Running an evaluation: every case under every variant, through the batch machinery.

The runs go through :func:`subagent.stream_many` (its pool of workers, its progress bar,
its usage limits for the whole evaluation), read lazily: memory holds the runs in flight,
never every Step. Each finished run is judged inside its worker, inside its trace, then
written as one record line at once. Runs already recorded (the same case digest, variant
digest and repetition) are skipped, so a killed evaluation resumes with what is missing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from subagent._agent import SubAgent
from subagent._checks import check_int
from subagent._errors import ConfigurationError
from subagent._limits import Price, UsageLimits
from subagent.batch import stream_many
from subagent.evals._cases import Case
from subagent.evals._judges import Judge, JudgeContext, VerdictRecord, run_judges
from subagent.evals._outcomes import outcome_from_data, outcome_from_run, run_tokens
from subagent.evals._records import RecordWriter, read_records, record_line, slot_key
from subagent.evals._report import Report, Tally
from subagent.evals._tracing import CaseTracer
from subagent.evals._variants import Plan, Variants, plan_variants
from subagent.llm import Usage
from subagent.records import FailReason, Step

__all__ = ["run_evaluation"]

Prices = Price | Mapping[str, Price]


@dataclass(slots=True)
class _Work:
    """One planned run: a case (one repetition) under one variant."""

    case: Case[Any]
    case_digest: str
    repeat: int
    plan: Plan
    plan_index: int
    case_index: int
    verdicts: list[VerdictRecord] = field(default_factory=list)
    correct: bool = False


class _Planned:
    """The runs still to make: each case, repetition and variant not in ``done``.

    Read lazily (never all built at once), and sized (for the progress bar).
    """

    def __init__(self, cases: Sequence[Case[Any]], digests: Sequence[str], repeat: int,
                 plans: Sequence[Plan], done: set[tuple[str, str, str, str, int]]):  # fmt: skip
        self._cases = cases
        self._digests = digests
        self._repeat = repeat
        self._plans = plans
        self._done = done
        self._count = sum(1 for _ in self._slots())

    def _slots(self) -> Iterator[tuple[int, int, int]]:
        done, digests = self._done, self._digests
        for index, case in enumerate(self._cases):
            for number in range(self._repeat):
                for which, plan in enumerate(self._plans):
                    if (case.name, digests[index], plan.name, plan.digest, number) not in done:
                        yield index, number, which

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[_Work]:
        for case, repeat, plan in self._slots():
            yield _Work(self._cases[case], self._digests[case], repeat, self._plans[plan],
                        plan, case)  # fmt: skip


class _CaseRunner:
    """What :func:`stream_many` runs in place of one agent.

    Each input is a :class:`_Work`, run by its variant's agent with its variant's options,
    then judged, in its own trace.

    ``stream_many`` runs one agent with one set of options; an evaluation needs a set per
    variant. Until the batch room takes options per input, this stands for the agent (it
    has what a batch reads of one: a name, budgets, ``check_options`` and ``run``).
    """

    def __init__(self, name: str, judges: Sequence[Judge], tracer: CaseTracer):
        self.name = name
        self.max_turns = 0  # a batch reads these for a run that raised: fixed up after
        self.return_retries = 0
        self._judges = judges
        self._tracer = tracer

    def check_options(self, **options: Any) -> None:
        """Nothing to check: each variant's options were checked when it was planned."""

    async def run(self, context: Any, **options: Any) -> Step[Any]:
        """Run one case under one variant, judge it, trace it."""
        work = cast(_Work, context)
        case, plan = work.case, work.plan
        with self._tracer.case(case.name, plan.name, work.repeat, case.tags) as span:
            step: Step[Any] = await plan.agent.run(case.context, messages=case.messages,
                                                   **plan.options)  # fmt: skip
            if step.ok and self._judges:
                judged = JudgeContext(case, step.output, step, plan.name)
                work.verdicts = await run_judges(self._judges, judged)
            work.correct = step.ok and all(verdict.passed for verdict in work.verdicts)
            if span is not None:
                span.judged(work.correct, work.verdicts)
        return step


def _cost(prices: Prices | None, model: str | None, tokens: tuple[int, int]) -> float | None:
    """What ``tokens`` (prompt, completion) cost on ``model``; ``None`` when not priced."""
    price = prices if prices is None or isinstance(prices, Price) else prices.get(model or "")
    if price is None:
        return None
    return price.of(Usage(input_tokens=tokens[0], output_tokens=tokens[1]))


def _budgets(step: Step[Any], plan: Plan) -> Step[Any]:
    """A Step the batch made for a run that raised, with the variant's budgets on it."""
    max_turns = plan.options.get("max_turns") or plan.agent.max_turns
    retries = plan.options.get("return_retries")
    retries = plan.agent.return_retries if retries is None else retries
    if (step.max_turns, step.return_retries) == (max_turns, retries):
        return step
    return step.model_copy(update={"max_turns": max_turns, "return_retries": retries})


def _stopped_by_evaluation(step: Step[Any], limits: UsageLimits | None) -> bool:
    """Whether the evaluation's own usage limits (``batch_limits``) ended the run.

    Such a run is not a result of its variant, so it is not recorded (it runs when the
    evaluation is resumed).
    """
    failure = step.failure
    return (
        limits is not None
        and failure is not None
        and failure.reason is FailReason.USAGE_LIMIT
        and "of the batch" in failure.message  # the batch's ledger names itself so
    )


def _head(dataset: str, work: _Work, cost: float | None) -> dict[str, Any]:
    """A record's fields besides its Step."""
    return {
        "dataset": dataset,
        "variant_index": work.plan_index,
        "case_index": work.case_index,
        "case": work.case.name,
        "case_digest": work.case_digest,
        "tags": list(work.case.tags),
        "repeat": work.repeat,
        "variant": work.plan.name,
        "variant_digest": work.plan.digest,
        "options": work.plan.described,
        "model": work.plan.model,
        "cost": cost,
        "correct": work.correct,
        "verdicts": [verdict.to_data() for verdict in work.verdicts],
    }


async def run_evaluation(
    *,
    dataset: str,
    cases: Sequence[Case[Any]],
    judges: Sequence[Judge],
    agent: SubAgent[Any],
    variants: Variants,
    out: str | Path | None,
    repeat: int,
    concurrency: int,
    progress: bool | None,
    batch_limits: UsageLimits | None,
    prices: Prices | None,
    options: Mapping[str, Any],
) -> Report:
    """Run (or resume) an evaluation; return its report. See ``Dataset.evaluate``."""
    if not isinstance(agent, SubAgent):
        raise ConfigurationError("agent", f"must be a SubAgent, got {agent!r:.80}")
    check_int("repeat", repeat, 1)
    if "messages" in options:
        raise ConfigurationError("messages", "messages belong to cases (Case(messages=...))")
    plans = plan_variants(agent, variants, options)
    if prices is None and batch_limits is not None:
        prices = batch_limits.prices
    digests = [case.digest for case in cases]
    path = None if out is None else Path(out)
    tally = Tally()
    done: set[tuple[str, str, str, str, int]] = set()
    if path is not None:  # what the file holds: not made again, and counted in the report
        for record in read_records(path):
            done.add(slot_key(record))
            tally.add(outcome_from_data(record), record)
    planned = _Planned(cases, digests, repeat, plans, done)
    runner = _CaseRunner(dataset, judges, CaseTracer(options.get("tracer_provider"), dataset))
    stopped = 0
    if len(planned):
        batch = stream_many(cast("SubAgent[Any]", runner), cast(Any, planned),
                            concurrency=concurrency, progress=progress,
                            batch_limits=batch_limits)  # fmt: skip
        with contextlib.ExitStack() as stack:
            writer = None if path is None else stack.enter_context(RecordWriter(path))
            async with batch:
                async for item in batch:
                    work = cast(_Work, item.context)
                    step = item.step
                    if _stopped_by_evaluation(step, batch_limits):
                        stopped += 1
                        continue
                    if step.failure is not None and step.failure.reason is FailReason.ERROR:
                        step = _budgets(step, work.plan)
                    tokens = run_tokens(step.turns)
                    head = _head(dataset, work, _cost(prices, work.plan.model, tokens))
                    if writer is not None:
                        writer.write(record_line(head, step))
                    tally.add(outcome_from_run(head, step, tokens), head)
    report = tally.report(dataset)
    report.pending = stopped
    return report
