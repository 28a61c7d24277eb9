"""What one recorded run counts for in a report: a small :class:`Outcome`, not its Step.

An outcome is read from a record's JSON (a file of records, ``subagent eval report``) or
from the live objects of a run (an evaluation without a file): both through the same
:func:`_outcome`, so the two never count differently.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from subagent.records import Step, Turn

__all__ = ["Outcome", "normalised", "outcome_from_data", "outcome_from_run", "run_tokens"]


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
        variant_index: Where its variant stood in the evaluation that made it.
        case_index: Where its case stood in its dataset. The two order a report's variants
            and cases, however the runs finished.
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
    tokens: tuple[int, int],
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
        input_tokens=tokens[0],
        output_tokens=tokens[1],
        cost=head.get("cost"),
        duration_s=duration_s,
        variant_index=head.get("variant_index", 0),
        case_index=head.get("case_index", 0),
    )


# Whether the loop flags a correction that repeats the failed reply itself (Turn.repeated);
# asked once: a missing attribute costs a pydantic model several µs per turn to look up.
_TURNS_FLAG_REPEATS = "repeated" in Turn.model_fields


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
    """The outcome of a record read from JSON (its ``step`` a Step's JSON form)."""
    step = record["step"]
    failure = step.get("failure")
    turns = step["turns"]
    return _outcome(
        record,
        ok=failure is None and step.get("state") is None,
        failure=None if failure is None else failure["reason"],
        turns=((turn["type"], turn.get("reply", ""), turn.get("repeated")) for turn in turns),
        tokens=_data_tokens(turns),
        duration_s=step.get("duration_s", 0.0),
    )


def outcome_from_run(
    head: Mapping[str, Any], step: Step[Any], tokens: tuple[int, int] | None = None
) -> Outcome:
    """The outcome of a run from its record's head and its Step, as objects.

    ``tokens``: the run's :func:`run_tokens`, when the caller counted them already.
    """
    flagged = _TURNS_FLAG_REPEATS
    return _outcome(
        head,
        ok=step.ok,
        failure=None if step.failure is None else step.failure.reason.value,
        turns=(
            (turn.type.value, turn.reply, getattr(turn, "repeated", None) if flagged else None)
            for turn in step.turns
        ),
        tokens=run_tokens(step.turns) if tokens is None else tokens,
        duration_s=step.duration_s,
    )
