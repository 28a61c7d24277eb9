"""What one recorded run counts for in a report: a small :class:`Outcome`, not its Step.

An outcome is read from a record's JSON (a file of records, ``subagent eval report``) or
from the live objects of a run (an evaluation without a file): both through the same
:func:`_outcome`, so the two never count differently. A record holds an agent's Step
(``"step"``) or, for a system that is not a subagent agent, its :class:`SystemRun`
(``"run"``): both come to the same outcome.

**Corrections** are what the library calls them: an agent's ``retry`` turns, which run
after the final work turn's answer was refused and are what the correction budget
(``return_retries``) and a :class:`~subagent.Correction` pay for and shape; an answer
refused in a ``normal`` turn is asked again in the next work turn, which is no correction.
A system's reply is a correction when it says so (``SystemReply.correction``), else when the
reply before it was refused. A correction *repeats* when its reply is a refused one again:
the same text (whitespace aside) and the same calls; an agent's turn carries the loop's own
mark (``Turn.repeated``: any reply the run refused before), which is read where the record
has it (a system's replies are compared with the refused reply before them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from subagent._text import shorten
from subagent.evals._systems import SystemRun
from subagent.records import Step, Turn, TurnType

__all__ = [
    "CRASHES",
    "Outcome",
    "normalised",
    "outcome_from_data",
    "outcome_from_run",
    "outcome_from_system",
    "run_tokens",
]


@dataclass(frozen=True, slots=True)
class Outcome:
    """One run as a report counts it.

    Attributes:
        case: The case's name.
        case_digest: The digest of its inputs and expected output.
        repeat: Which repetition of the case (from 0).
        variant: The variant's name.
        ok: Whether the run produced a valid output.
        correct: Whether it was valid and every judge passed it.
        failure: The failure reason of a failed run.
        judge_errors: How many judges raised on it.
        corrected: Whether a correction turn ran (see the module's docstring).
        correction_turns: Correction turns.
        repeated_corrections: Correction turns whose reply repeated the refused reply
            before it (whitespace aside, the same calls).
        calls: LLM calls (turns).
        input_tokens: Prompt tokens, nested agents included.
        output_tokens: Completion tokens, nested agents included.
        cost: What the tokens cost, when the model was priced.
        duration_s: The run's wall time.
        variant_index: Where its variant stood in the evaluation that made it.
        case_index: Where its case stood in its dataset. The two order a report's variants
            and cases, however the runs finished.
        tags: The case's tags (``Report.tagged`` selects by them).
        stop_reasons: How many of its replies ended for each stop reason.
        error: What went wrong, for a run that raised (failure ``error``) or failed at the
            transport (``llm_error``): the failure's message, shortened.
        judged: Each judge's verdict on it: ``(judge, passed, score, tokens the judge
            spent)`` (none for a run
            that failed: judges see valid outputs only).
    """

    case: str
    case_digest: str
    repeat: int
    variant: str
    ok: bool
    correct: bool
    failure: str | None
    judge_errors: int
    corrected: bool
    correction_turns: int
    repeated_corrections: int
    calls: int
    input_tokens: int
    output_tokens: int
    cost: float | None
    duration_s: float
    variant_index: int = 0
    case_index: int = 0
    tags: tuple[str, ...] = ()
    stop_reasons: tuple[tuple[str, int], ...] = ()
    error: str | None = None
    judged: tuple[tuple[str, bool, float | None, int], ...] = ()

    @property
    def crashed(self) -> bool:
        """Whether the run never became a result of its variant.

        It raised, or its model could not be reached (``subagent eval run --rerun-failed``
        makes it again).
        """
        return self.failure in CRASHES

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Outcome:
        """The outcome of a record as read from a records file (``read_records``).

        For a view of one's own over an evaluation's records: a derived outcome is
        ``dataclasses.replace(outcome, variant=..., correct=...)``, and a
        :class:`~subagent.evals.Report` counts any list of outcomes.
        """
        return outcome_from_data(record)

    @property
    def salvaged(self) -> bool:
        """A run a correction turn made correct."""
        return self.corrected and self.correct

    @property
    def tokens(self) -> int:
        """Prompt and completion tokens."""
        return self.input_tokens + self.output_tokens


def normalised(text: str) -> str:
    """``text`` with its runs of whitespace made single spaces (and none at the ends)."""
    return " ".join(text.split())


# One turn as the counting below reads it: whether it is a correction (None: when the one
# before it was refused), its reply, its calls (objects or JSON, compared only when needed),
# whether its answer was refused, the loop's own repeat flag (None when it has none), and
# its stop reason.
_TurnView = tuple["bool | None", str, Sequence[Any], bool, "bool | None", str | None]


def _call_key(call: Any) -> tuple[Any, Any]:
    if isinstance(call, Mapping):
        return call.get("name"), call.get("arguments")
    return call.name, call.arguments


def _repeats(reply: str, calls: Sequence[Any], before: str, calls_before: Sequence[Any]) -> bool:
    if normalised(reply) != normalised(before) or len(calls) != len(calls_before):
        return False
    return all(_call_key(a) == _call_key(b) for a, b in zip(calls, calls_before, strict=True))


CRASHES: Final = frozenset({"error", "llm_error"})
"""The failure reasons of a run that is no result of its variant: it raised (a bug in the
agent, a tool, a validator), or its model could not be reached."""
_ERROR_CHARS: Final = 200


def _judged(verdict: Mapping[str, Any]) -> tuple[str, bool, float | None, int]:
    """A recorded verdict as an outcome keeps it: (judge, passed, score, tokens spent)."""
    score = verdict.get("score")
    tokens = verdict.get("tokens")
    return (
        str(verdict.get("judge")),
        bool(verdict.get("passed")),
        float(score) if isinstance(score, int | float) else None,
        tokens if type(tokens) is int and tokens > 0 else 0,
    )


def _outcome(
    head: Mapping[str, Any],
    *,
    ok: bool,
    failure: str | None,
    turns: Iterable[_TurnView],
    tokens: tuple[int, int],
    duration_s: float,
    calls: int | None = None,
    message: str | None = None,
) -> Outcome:
    correction_turns = repeated = counted = 0
    stops: dict[str, int] = {}
    before: tuple[str, Sequence[Any]] | None = None
    refused = False
    for is_correction, reply, tool_calls, refused_now, flagged, stop in turns:
        counted += 1
        if stop is not None:
            stops[stop] = stops.get(stop, 0) + 1
        if refused if is_correction is None else is_correction:
            correction_turns += 1
            if flagged is not None:  # the loop's own flag (Turn.repeated), when it has one
                repeated += flagged
            elif before is not None and _repeats(reply, tool_calls, *before):
                repeated += 1
        before = (reply, tool_calls)
        refused = refused_now
    verdicts = head.get("verdicts") or ()
    return Outcome(
        case=head["case"],
        case_digest=head["case_digest"],
        repeat=head.get("repeat", 0),
        variant=head["variant"],
        ok=ok,
        correct=bool(head["correct"]),
        failure=failure,
        judge_errors=sum(1 for verdict in verdicts if verdict.get("error")),
        corrected=correction_turns > 0,
        correction_turns=correction_turns,
        repeated_corrections=repeated,
        calls=counted if calls is None else calls,
        input_tokens=tokens[0],
        output_tokens=tokens[1],
        cost=head.get("cost"),
        duration_s=duration_s,
        variant_index=head.get("variant_index", 0),
        case_index=head.get("case_index", 0),
        tags=_shared(tuple(head.get("tags") or ())),
        stop_reasons=_shared(tuple(stops.items())),
        error=shorten(message or "", _ERROR_CHARS) if failure in CRASHES else None,
        judged=_shared(tuple(_judged(verdict) for verdict in verdicts)),
    )


_SHARED: dict[tuple[Any, ...], tuple[Any, ...]] = {}
_SHARED_LIMIT = 4096  # distinct tag sets and stop-reason counts kept shared


def _shared(value: tuple[Any, ...]) -> tuple[Any, ...]:
    """``value``, or an equal tuple already held.

    Outcomes share their few distinct tag sets, stop-reason counts and verdicts instead of
    each holding its own (about 150 bytes a run); at most :data:`_SHARED_LIMIT` are kept.
    """
    found = _SHARED.get(value)
    if found is not None:
        return found
    if len(_SHARED) < _SHARED_LIMIT:
        _SHARED[value] = value
    return value


def run_tokens(turns: Sequence[Turn]) -> tuple[int, int]:
    """Prompt and completion tokens of a run's turns and of the agents they ran as tools.

    What ``Step.usage.total`` counts, summed without building the usage records (an
    evaluation counts them for every run, and records leave them out: they follow from the
    turns).
    """
    prompt = completion = 0
    for turn in turns:
        prompt += turn.usage.input_tokens
        completion += turn.usage.output_tokens
        for result in turn.tool_results:
            if result.step is not None:
                nested = run_tokens(result.step.turns)
                prompt += nested[0]
                completion += nested[1]
    return prompt, completion


def _data_tokens(turns: Sequence[Mapping[str, Any]]) -> tuple[int, int]:
    """:func:`run_tokens` of turns in their JSON form."""
    prompt = completion = 0
    for turn in turns:
        usage = turn.get("usage") or {}
        prompt += usage.get("input_tokens", 0)
        completion += usage.get("output_tokens", 0)
        for result in turn.get("tool_results") or ():
            nested = result.get("step")
            if nested is not None:
                inner = _data_tokens(nested["turns"])
                prompt += inner[0]
                completion += inner[1]
    return prompt, completion


def outcome_from_data(record: Mapping[str, Any]) -> Outcome:
    """The outcome of a record read from JSON.

    Its ``step`` is a Step's JSON form, or its ``run`` a system's run.
    """
    if "run" in record and "step" not in record:
        return outcome_from_system(record, record["run"])
    step = record["step"]
    failure = step.get("failure")
    turns = step["turns"]
    return _outcome(
        record,
        ok=failure is None and step.get("state") is None,
        failure=None if failure is None else failure["reason"],
        turns=(
            (
                turn["type"] == "retry",
                turn.get("reply", ""),
                turn.get("tool_calls") or (),
                False,
                turn.get("repeated"),
                turn.get("stop_reason"),
            )
            for turn in turns
        ),
        tokens=_data_tokens(turns),
        duration_s=step.get("duration_s", 0.0),
        message=None if failure is None else failure.get("message"),
    )


def outcome_from_run(
    head: Mapping[str, Any], step: Step[Any], tokens: tuple[int, int] | None = None
) -> Outcome:
    """The outcome of a run from its record's head and its Step, as objects.

    ``tokens``: the run's :func:`run_tokens`, when the caller counted them already.
    """
    return _outcome(
        head,
        ok=step.ok,
        failure=None if step.failure is None else step.failure.reason.value,
        turns=(
            (
                turn.type is TurnType.RETRY,
                turn.reply,
                turn.tool_calls,
                False,
                turn.repeated,  # the loop's own mark
                None if turn.stop_reason is None else turn.stop_reason.value,
            )
            for turn in step.turns
        ),
        tokens=run_tokens(step.turns) if tokens is None else tokens,
        duration_s=step.duration_s,
        message=None if step.failure is None else step.failure.message,
    )


def outcome_from_system(head: Mapping[str, Any], run: SystemRun | Mapping[str, Any]) -> Outcome:
    """The outcome of a system's run (a :class:`SystemRun`, or its JSON form)."""
    data = run.model_dump() if isinstance(run, SystemRun) else run
    replies = data.get("replies") or ()
    return _outcome(
        head,
        ok=data.get("failure") is None,
        failure=data.get("failure"),
        turns=(
            (
                reply.get("correction"),
                reply.get("text") or "",
                reply.get("tool_calls") or (),
                reply.get("error") is not None,
                None,
                reply.get("stop_reason"),
            )
            for reply in replies
        ),
        tokens=(data.get("input_tokens") or 0, data.get("output_tokens") or 0),
        duration_s=data.get("duration_s") or 0.0,
        calls=data.get("calls"),
        message=data.get("message"),
    )
