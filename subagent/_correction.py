"""Correction turns that differ from the failed attempt: :class:`Correction`.

A run's correction turns (the ``retry`` phase) are sent as its work turns were, unless the
agent or the run gives a :class:`Correction`: its own output mode (the answer asked for as
prompted JSON in the text, through the provider's structured output, or through a forced
answer tool), its own sampling settings, its own model (escalation to a stronger one), and
whether the model may still give up. :meth:`Correction.applies` says which turns take it:
every correction turn, the final work turn too, or only a correction that follows a
correction that repeated the failed reply word for word.

Neither given, a run takes :func:`default_correction`'s: an agent with a typed output has its
corrections (and, where its output is an object, its final work turn) under the server's
structured output where the server has one (the records' choice: docs/evaluation.md, "The
defaults, from these records").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from subagent._checks import check_bool
from subagent._errors import ConfigurationError
from subagent._phases import Phase
from subagent.llm import LLM
from subagent.records import OutputRequest

__all__ = [
    "CORRECTIONS_UNDER_SCHEMA",
    "CORRECTION_OUTPUTS",
    "CORRECTION_WHEN",
    "FINAL_UNDER_SCHEMA",
    "Correction",
    "CorrectionOutput",
    "auto_output",
    "default_correction",
    "may_give_up",
]

CorrectionOutput = Literal["text", "json_schema", "tool", "auto"]
CORRECTION_OUTPUTS: tuple[CorrectionOutput, ...] = ("text", "json_schema", "tool", "auto")
CorrectionWhen = Literal["retry", "final", "repeat"]
CORRECTION_WHEN: tuple[CorrectionWhen, ...] = ("retry", "final", "repeat")


@dataclass(frozen=True, slots=True)
class Correction:
    """How correction turns are sent, when they should differ from the failed attempt.

    The first attempt thinks freely; a correction is where a constraint costs least (a
    grammar, another temperature, a stronger model). Give one to the agent
    (``SubAgent(correction=...)``) or to a run (``run(correction=...)``).

    Args:
        output: How the answer is asked for: ``"text"`` (prompted JSON in the reply's text,
            as work turns do), ``"json_schema"`` (the provider's structured output: the
            output's schema sent as the answer's grammar, so the reply is valid JSON of it
            by construction) or ``"tool"`` (a forced final-answer tool whose arguments are
            the answer). ``"auto"``: ``"json_schema"`` where the output has a schema and
            the server has structured output, else as text (the adapter sends the request
            without the grammar; an output without a schema is asked for as text). ``None``:
            as the work turns. A mode the server cannot serve is refused by the adapter,
            naming the mode and the server (the run ends ``failed(llm_error)``);
            ``"json_schema"`` and ``"tool"`` need a typed output (a pydantic model or type).
        settings: Model settings merged over the run's on these turns (``temperature``,
            ``seed``...).
        llm: Another model for these turns (escalation), or a spec string; ``None``: the
            run's model.
        when: Which turns take it: ``"retry"`` (every correction turn, the default),
            ``"final"`` (the last work turn, ``must_return``, too) or ``"repeat"`` (a
            correction turn that follows a correction that repeated the failed reply word
            for word).
        allow_fail: Whether the model may still give up (``{"fail": ...}``) on these turns;
            ``False`` feeds an explicit fail back as an answer to correct.
        json_schema: The schema the answer is constrained to in output modes
            ``"json_schema"`` and ``"tool"``, when the grammar should be narrower than the
            output's own schema (the calls of one request's functions, where the output is
            any list of calls); the answer is still parsed and validated as the output.
            ``None``: the output's schema. With a schema given, an untyped output (a
            parser, ``str``) can be constrained too.

    Raises:
        ConfigurationError: A value is invalid; the message names the field.
    """

    output: CorrectionOutput | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    llm: LLM | str | None = None
    when: CorrectionWhen = "retry"
    allow_fail: bool = True
    json_schema: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.output is not None and self.output not in CORRECTION_OUTPUTS:
            raise ConfigurationError(
                "correction.output", f"must be one of {CORRECTION_OUTPUTS} or None, got "
                f"{self.output!r}"
            )  # fmt: skip
        if not isinstance(self.settings, Mapping):
            raise ConfigurationError(
                "correction.settings", f"must be a mapping, got {self.settings!r}"
            )
        if self.when not in CORRECTION_WHEN:
            raise ConfigurationError(
                "correction.when", f"must be one of {CORRECTION_WHEN}, got {self.when!r}"
            )
        check_bool("correction.allow_fail", self.allow_fail)
        object.__setattr__(self, "settings", dict(self.settings))
        if self.json_schema is None:
            return
        if not isinstance(self.json_schema, Mapping):
            raise ConfigurationError(
                "correction.json_schema", f"must be a JSON schema (a mapping), got "
                f"{self.json_schema!r}"
            )  # fmt: skip
        if self.output not in ("json_schema", "tool", "auto"):
            raise ConfigurationError(
                "correction.json_schema", f"is sent only with output='json_schema', 'tool' "
                f"or 'auto', and output is {self.output!r}"
            )  # fmt: skip
        object.__setattr__(self, "json_schema", dict(self.json_schema))

    def applies(self, phase: Phase, after_repeat: bool) -> bool:
        """Whether a turn in ``phase`` takes these settings.

        Args:
            phase: The phase the turn starts in.
            after_repeat: Whether the turn before it was a correction that repeated the
                failed reply.
        """
        if phase is Phase.RETRY:
            return self.when != "repeat" or after_repeat
        return phase is Phase.MUST_RETURN and self.when == "final"


FINAL_UNDER_SCHEMA: Final = Correction(output="auto", when="final")
"""The default of an agent whose output is a JSON object (a pydantic model): its final work
turn and its corrections under the server's structured output, where it has one.

On ``make eval``'s typed tasks it took Qwen2.5-Coder 1.5B from 31% to 84% and the 0.5B
from 69% to 81%, at one call per case, and no category did worse
(docs/evaluation.md, "The defaults, from these records")."""

CORRECTIONS_UNDER_SCHEMA: Final = Correction(output="auto")
"""The default of an agent whose output is another JSON value (a list, a number, a union):
its corrections under the server's structured output; its work turns free.

On BFCL's lists of calls the grammar on the final turn made the 0.5B answer ``[]`` to every
question (36% to 20%), where corrections under it salvaged 7 of 11 refused answers (36% to
43%) and cost the 1.5B nothing (docs/evaluation.md)."""


def auto_output(schema: Mapping[str, Any] | None) -> OutputRequest | None:
    """What ``Correction(output="auto")`` asks of a turn (``None`` without a schema).

    The grammar of ``schema`` where the server has structured output; else the adapter sends
    the request as text.
    """
    if not schema:  # none, or {} (any value): no grammar to send
        return None
    return OutputRequest(mode="json_schema", json_schema=dict(schema), fallback="text")


def default_correction(schema: Mapping[str, Any] | None) -> Correction | None:
    """The correction of a run whose agent and run give none, by the output's JSON schema.

    An object (a pydantic model): :data:`FINAL_UNDER_SCHEMA`. Another JSON value (a list,
    a number, a union): :data:`CORRECTIONS_UNDER_SCHEMA`. No schema (text, a parser, any
    value): ``None``, every turn as the work turns.
    """
    if not schema:
        return None
    return FINAL_UNDER_SCHEMA if schema.get("type") == "object" else CORRECTIONS_UNDER_SCHEMA


def may_give_up(allow_fail: bool, correction: Correction | None, corrected: bool) -> bool:
    """Whether a turn's explicit fail (``{"fail": ...}``) may end the run.

    Not where the agent does not offer it (``allow_fail``), nor on a correction turn whose
    :class:`Correction` says it may not give up (``Correction(allow_fail=False)``): there
    the fail is fed back as an answer to correct.
    """
    if not allow_fail:
        return False
    return not (corrected and correction is not None and not correction.allow_fail)
