"""Running an evaluation: every case under every variant, through the batch machinery.

The runs go through :func:`subagent.stream_many` (its pool of workers, its progress bar,
its usage limits for the whole evaluation), read lazily: memory holds the runs in flight,
never every Step. Each finished run is judged inside its worker, inside its trace, then
written as one record line at once. When a judge reads spans, each agent run traces
through a :class:`~subagent.evals._spans.SpanRecorder` of its own, whose spans its judges
see. Runs already recorded (the same case digest, variant
digest and repetition) are skipped, so a killed evaluation resumes with what is missing.

Runs made elsewhere (an older harness, another tool) join an evaluation's records through
:func:`import_runs`: planned, judged and recorded as if the evaluation had made them.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from subagent._checks import check_int
from subagent._errors import ConfigurationError
from subagent._limits import Price, UsageLimits
from subagent.batch import stream_many
from subagent.evals._cases import Case
from subagent.evals._judges import Judge, JudgeContext, VerdictRecord, run_judges
from subagent.evals._outcomes import (
    outcome_from_data,
    outcome_from_run,
    outcome_from_system,
    run_tokens,
)
from subagent.evals._records import RecordWriter, read_records, record_line, run_line, slot_key
from subagent.evals._report import Report, Tally
from subagent.evals._spans import SpanRecorder
from subagent.evals._systems import SystemRun
from subagent.evals._tracing import CaseTracer, configured_provider
from subagent.evals._variants import Plan, Planner, Variants
from subagent.llm import Usage
from subagent.records import FailReason, Failure, Step
from subagent.records._runs import build_step

__all__ = ["count_pending", "import_runs", "run_evaluation"]

Prices = Price | Mapping[str, Price]
_Slot = tuple[str, str, str, str, int]


@dataclass(slots=True)
class _Work:
    """One planned run: a case (one repetition) under one variant."""

    case: Case[Any]
    case_digest: str
    repeat: int
    plan: Plan
    case_index: int
    verdicts: list[VerdictRecord] = field(default_factory=list)
    correct: bool = False
    ran_by: str = ""
    run: SystemRun | None = None


class _Planned:
    """The runs still to make: each case, repetition and variant not in ``done``.

    Read lazily (never all built at once), and sized (for the progress bar).
    """

    def __init__(self, cases: Sequence[Case[Any]], digests: Sequence[str], repeat: int,
                 planner: Planner, done: set[_Slot]):  # fmt: skip
        self._cases = cases
        self._digests = digests
        self._repeat = repeat
        self._planner = planner
        self._done = done
        self._count = sum(1 for _ in self._slots())

    def _slots(self) -> Iterator[tuple[int, int, Plan]]:
        done, digests = self._done, self._digests
        for index, case in enumerate(self._cases):
            plans = self._planner.plans(case)
            for number in range(self._repeat):
                for plan in plans:
                    if (case.name, digests[index], plan.name, plan.digest, number) not in done:
                        yield index, number, plan

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[_Work]:
        for case, repeat, plan in self._slots():
            yield _Work(self._cases[case], self._digests[case], repeat, plan, case)


def _failed_system_run(exc: Exception) -> SystemRun:
    return SystemRun(failure="error", message=f"{type(exc).__name__}: {exc}")


class _CaseRunner:
    """What :func:`stream_many` runs in place of one agent.

    Each input is a :class:`_Work`, run by its variant's agent with its variant's options
    (or by its system), then judged, in its own trace.

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
        # Spans are captured only for a judge that reads them: otherwise a run is given
        # the options it would have been given.
        self._spans = any(getattr(one, "reads_spans", False) for one in judges)

    def check_options(self, **options: Any) -> None:
        """Nothing to check: each variant's options were checked when it was planned."""

    async def run(self, context: Any, **options: Any) -> Step[Any]:
        """Run one case under one variant, judge it, trace it."""
        work = cast(_Work, context)
        case, plan = work.case, work.plan
        with self._tracer.case(case.name, plan.name, work.repeat, case.tags) as span:
            if plan.system is not None:
                step = await self._system(work)
            else:
                agent = plan.agent_for(case)
                work.ran_by = agent.name
                options, recorder = plan.options, None
                if self._spans:
                    recorder = SpanRecorder(configured_provider(options.get("tracer_provider")))
                    options = {**options, "tracer_provider": recorder}
                step = await agent.run(case.context, messages=case.messages, **options)
                if step.ok and self._judges:
                    spans = None if recorder is None else recorder.spans()
                    judged = JudgeContext(case, step.output, step, plan.name, spans=spans)
                    work.verdicts = await run_judges(self._judges, judged)
                work.correct = step.ok and all(verdict.passed for verdict in work.verdicts)
            if span is not None:
                span.judged(work.correct, work.verdicts)
        return step

    async def _system(self, work: _Work) -> Step[Any]:
        """Run a system's case; the Step returned only tells the batch how it went."""
        system = work.plan.system
        assert system is not None
        work.ran_by = system.name
        started = time.perf_counter()
        try:
            run = _checked_run(system.name, await system.function(work.case, **work.plan.options))
        except Exception as exc:  # a failed run, recorded; cancellation goes on
            run = _failed_system_run(exc)
        if run.duration_s is None:
            run = run.model_copy(update={"duration_s": time.perf_counter() - started})
        work.run = run
        work.verdicts, work.correct = await _judged_system_run(self._judges, work, run)
        failure = None if run.ok else Failure(reason=FailReason.ERROR, message=run.failure or "")
        return build_step(agent=system.name, output=run.output, failure=failure, turns=[],
                          max_turns=1, return_retries=0,
                          duration_s=run.duration_s or 0.0)  # fmt: skip


def _checked_run(system: str, run: object) -> SystemRun:
    if not isinstance(run, SystemRun):
        raise TypeError(f"system {system!r} returned {run!r:.80}, not a SystemRun")
    return run


async def _judged_system_run(
    judges: Sequence[Judge], work: _Work, run: SystemRun
) -> tuple[list[VerdictRecord], bool]:
    verdicts: list[VerdictRecord] = []
    if run.ok and judges:
        judged = JudgeContext(work.case, run.output, None, work.plan.name, run)
        verdicts = await run_judges(judges, judged)
    return verdicts, run.ok and all(verdict.passed for verdict in verdicts)


def _cost(prices: Prices | None, model: str | None, tokens: tuple[int, int]) -> float | None:
    """What ``tokens`` (prompt, completion) cost on ``model``; ``None`` when not priced."""
    price = prices if prices is None or isinstance(prices, Price) else prices.get(model or "")
    if price is None:
        return None
    return price.of(Usage(input_tokens=tokens[0], output_tokens=tokens[1]))


def _budgets(step: Step[Any], work: _Work) -> Step[Any]:
    """A Step the batch made for a run that raised, with the variant's budgets on it."""
    plan = work.plan
    agent = plan.agent
    max_turns = plan.options.get("max_turns") or (agent.max_turns if agent else step.max_turns)
    retries = plan.options.get("return_retries")
    if retries is None:
        retries = agent.return_retries if agent else step.return_retries
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
    """A record's fields besides its Step (or run)."""
    return {
        "dataset": dataset,
        "variant_index": work.plan.index,
        "case_index": work.case_index,
        "case": work.case.name,
        "case_digest": work.case_digest,
        "tags": list(work.case.tags),
        "repeat": work.repeat,
        "variant": work.plan.name,
        "variant_digest": work.plan.digest,
        "agent": work.ran_by or None,
        "options": work.plan.described,
        "model": work.plan.model,
        "cost": cost,
        "correct": work.correct,
        "verdicts": [verdict.to_data() for verdict in work.verdicts],
    }


def _recorded(path: Path | None, tally: Tally, *, keep_crashed: bool = True) -> set[_Slot]:
    """What the file holds: counted in the report, and not made again.

    ``keep_crashed=False``: a run that crashed (``Outcome.crashed``) is made again (its
    slot is left out of the set); its new record takes its place in the report.
    """
    done: set[_Slot] = set()
    if path is not None:
        for record in read_records(path):
            outcome = outcome_from_data(record)
            key = slot_key(record)
            if keep_crashed or not outcome.crashed:
                done.add(key)
            else:
                done.discard(key)  # a later record of the same run crashed: made again
            tally.add(outcome, record)
    return done


def count_pending(
    *,
    cases: Sequence[Case[Any]],
    agent: object,
    variants: Variants,
    out: str | Path,
    repeat: int,
    options: Mapping[str, Any],
) -> int:
    """The runs an evaluation would make: planned, and not in ``out``."""
    _checked_start(cases, repeat, options)
    planner = Planner(agent, variants, options, cases)
    done = {slot_key(record) for record in read_records(Path(out))}
    return len(_Planned(cases, [case.digest for case in cases], repeat, planner, done))


def _checked_start(cases: Sequence[Case[Any]], repeat: int, options: Mapping[str, Any]) -> None:
    check_int("repeat", repeat, 1)
    if "messages" in options:
        raise ConfigurationError("messages", "messages belong to cases (Case(messages=...))")


async def run_evaluation(
    *,
    dataset: str,
    cases: Sequence[Case[Any]],
    judges: Sequence[Judge],
    agent: object,
    variants: Variants,
    out: str | Path | None,
    repeat: int,
    concurrency: int,
    progress: bool | None,
    batch_limits: UsageLimits | None,
    prices: Prices | None,
    options: Mapping[str, Any],
    rerun_failed: bool = False,
) -> Report:
    """Run (or resume) an evaluation; return its report. See ``Dataset.evaluate``."""
    _checked_start(cases, repeat, options)
    planner = Planner(agent, variants, options, cases)
    if prices is None and batch_limits is not None:
        prices = batch_limits.prices
    digests = [case.digest for case in cases]
    path = None if out is None else Path(out)
    tally = Tally()
    done = _recorded(path, tally, keep_crashed=not rerun_failed)
    planned = _Planned(cases, digests, repeat, planner, done)
    runner = _CaseRunner(dataset, judges, CaseTracer(options.get("tracer_provider"), dataset))
    stopped = 0
    if len(planned):
        batch = stream_many(cast("Any", runner), cast(Any, planned), concurrency=concurrency,
                            progress=progress, batch_limits=batch_limits)  # fmt: skip
        with contextlib.ExitStack() as stack:
            writer = None if path is None else stack.enter_context(RecordWriter(path))
            async with batch:
                async for item in batch:
                    work = cast(_Work, item.context)
                    step = item.step
                    if _stopped_by_evaluation(step, batch_limits):
                        stopped += 1
                        continue
                    if work.run is not None:  # a system's run
                        run = work.run
                        tokens = (run.input_tokens, run.output_tokens)
                        head = _head(dataset, work, _cost(prices, work.plan.model, tokens))
                        if writer is not None:
                            writer.write(run_line(head, run))
                        tally.add(outcome_from_system(head, run), head)
                        continue
                    if step.failure is not None and step.failure.reason is FailReason.ERROR:
                        step = _budgets(step, work)
                    tokens = run_tokens(step.turns)
                    head = _head(dataset, work, _cost(prices, work.plan.model, tokens))
                    if writer is not None:
                        writer.write(record_line(head, step))
                    tally.add(outcome_from_run(head, step, tokens), head)
    report = tally.report(dataset)
    report.pending = stopped
    return report


ImportedRun = (
    tuple[str, str, "Step[Any] | SystemRun"] | tuple[str, str, "Step[Any] | SystemRun", int]
)
"""A run made elsewhere: ``(case name, variant name, its Step or SystemRun[, repetition])``."""


async def import_runs(
    *,
    dataset: str,
    cases: Sequence[Case[Any]],
    judges: Sequence[Judge],
    agent: object,
    variants: Variants,
    runs: Iterable[ImportedRun],
    out: str | Path,
    prices: Prices | None,
    options: Mapping[str, Any],
) -> int:
    """Record runs made elsewhere as the evaluation would have; see ``Dataset.import_runs``."""
    planner = Planner(agent, variants, options, cases)
    path = Path(out)
    done = _recorded(path, Tally())
    index = {case.name: (number, case, case.digest) for number, case in enumerate(cases)}
    written = 0
    with RecordWriter(path) as writer:
        for item in runs:
            name, variant, result = item[0], item[1], item[2]
            repeat = item[3] if len(item) > 3 else 0
            if name not in index:
                raise ConfigurationError("runs", f"no case {name!r} in the dataset")
            number, case, case_digest = index[name]
            plan = next((p for p in planner.plans(case) if p.name == variant), None)
            if plan is None:
                raise ConfigurationError("runs", f"case {name!r}: no variant {variant!r}")
            if (name, case_digest, variant, plan.digest, repeat) in done:
                continue
            work = _Work(case, case_digest, repeat, plan, number)
            if isinstance(result, SystemRun):
                work.ran_by = plan.system.name if plan.system else (
                    plan.agent.name if plan.agent else ""
                )  # fmt: skip
                work.verdicts, work.correct = await _judged_system_run(judges, work, result)
                tokens = (result.input_tokens, result.output_tokens)
                head = _head(dataset, work, _cost(prices, plan.model, tokens))
                writer.write(run_line(head, result))
            elif isinstance(result, Step):
                work.ran_by = result.agent
                if result.ok and judges:
                    judged = JudgeContext(case, result.output, result, plan.name)
                    work.verdicts = await run_judges(judges, judged)
                work.correct = result.ok and all(v.passed for v in work.verdicts)
                head = _head(dataset, work, _cost(prices, plan.model, run_tokens(result.turns)))
                writer.write(record_line(head, result))
            else:
                raise ConfigurationError(
                    "runs", f"case {name!r}: a run is a Step or a SystemRun, got {result!r:.80}"
                )
            done.add((name, case_digest, variant, plan.digest, repeat))
            written += 1
    return written
