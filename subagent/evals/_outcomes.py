"""What one recorded run counts for in a report: a small :class:`Outcome`, not its Step.

An outcome is read from a record's JSON (a file of records, ``subagent eval report``) or
from the live objects of a run (an evaluation without a file): both through the same
:func:`_outcome`, so the two never count differently.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from subagent._records import Step

__all__ = ["Outcome", "normalised", "outcome_from_data", "outcome_from_run"]


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
        corrected: Whether a correction turn ran (the first answer failed validation).
        correction_turns: Correction (``retry``) turns.
        repeated_corrections: Correction turns whose reply repeated the failed reply before
            it (whitespace aside).
        calls: LLM calls (turns).
        input_tokens: Prompt tokens, nested agents included.
        output_tokens: Completion tokens, nested agents included.
        cost: What the tokens cost, when the model was priced.
        duration_s: The run's wall time.
        order: Where its variant and its case stood in the evaluation that made it: what
            orders a report's variants and cases, however the runs finished.
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
    order: tuple[int, int] = (0, 0)

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


def _outcome(
    head: Mapping[str, Any],
    *,
    ok: bool,
    failure: str | None,
    turns: Iterable[tuple[str, str, bool | None]],
    input_tokens: int,
    output_tokens: int,
    duration_s: float,
) -> Outcome:
    correction_turns = repeated = calls = 0
    previous: str | None = None
    for kind, reply, flagged in turns:
        calls += 1
        if kind == "retry":
            correction_turns += 1
            if flagged is not None:  # the loop's own flag (Turn.repeated), when it has one
                repeated += flagged
            elif previous is not None and normalised(reply) == normalised(previous):
                repeated += 1
        previous = reply
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
        calls=calls,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cost=head.get("cost"),
        duration_s=duration_s,
        order=(head.get("variant_index", 0), head.get("case_index", 0)),
    )


def outcome_from_data(record: Mapping[str, Any]) -> Outcome:
    """The outcome of a record read from JSON (its ``step`` a Step's JSON form)."""
    step = record["step"]
    failure = step.get("failure")
    total = step["usage"]["total"]
    return _outcome(
        record,
        ok=failure is None and step.get("state") is None,
        failure=None if failure is None else failure["reason"],
        turns=(
            (turn["type"], turn.get("reply", ""), turn.get("repeated")) for turn in step["turns"]
        ),
        input_tokens=total["input_tokens"],
        output_tokens=total["output_tokens"],
        duration_s=step.get("duration_s", 0.0),
    )


def outcome_from_run(head: Mapping[str, Any], step: Step[Any]) -> Outcome:
    """The outcome of a run from its record's head and its Step, as objects."""
    total = step.usage.total
    return _outcome(
        head,
        ok=step.ok,
        failure=None if step.failure is None else step.failure.reason.value,
        turns=(
            (turn.type.value, turn.reply, getattr(turn, "repeated", None)) for turn in step.turns
        ),
        input_tokens=total.input_tokens,
        output_tokens=total.output_tokens,
        duration_s=step.duration_s,
    )
