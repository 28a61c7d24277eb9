"""The grouped knobs of an agent: how its tools are used, how its replies are read, its timeouts.

Three small records keep :class:`~subagent.SubAgent`'s own fields to what most agents set
(``SubAgent(tool_policy=ToolPolicy(protocol="react"))``); each field keeps the spelling it
had as an agent keyword, and the run options that override one (``context_policy``,
``timeout``, ``mission_timeout``) keep theirs. :func:`moved_keywords` turns the old
keywords into the records for one release, with a :class:`DeprecationWarning`.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar, cast

from subagent._checks import check_bool, check_int, check_seconds
from subagent._conversation import ContextPolicy, check_policy
from subagent._errors import ConfigurationError
from subagent.parsers._contract import DEFAULT_MAX_REPLY_CHARS
from subagent.protocols import PROTOCOLS, ProtocolName
from subagent.tools._execute import TOOL_CALLS_PER_TURN, TOOL_RESULT_LIMIT

__all__ = [
    "MOVED_KEYWORDS",
    "ReplyPolicy",
    "Timeouts",
    "ToolPolicy",
    "flat_fields",
    "moved_keywords",
    "with_fields",
]

AgentT = TypeVar("AgentT")


@dataclass(frozen=True, slots=True)
class ToolPolicy:
    """How an agent's tools travel, run and are judged.

    Args:
        protocol: How tools travel: ``native`` (the model's own tool calling, the default)
            or ``react`` (tools described in the prompt, one action per reply, read from
            the text; for models without reliable tool calling).
        parallel_tool_calls: Run the calls of one reply concurrently (default); ``False``
            runs them one after another, in order.
        prune_unknown_args: Drop arguments a tool does not take, recording their names on
            the turn and the tool span (default); ``False`` reports them to the model as
            invalid. A :class:`~subagent.Tool` may set its own.
        max_tool_result_chars: Characters of a tool's result the model is shown; the rest
            is cut, with a note saying how much.
        max_tool_calls_per_turn: Tool calls of one reply that are run (default 32); the
            calls past them are refused, never run, and the model is told only the first
            ones ran (``error_type="too_many_calls"``).
        keep_tool_schemas: Keep tool schemas in ``must_return``/``retry`` requests and ask
            for ``tool_choice="none"`` (friendlier to prompt caches); calls are refused
            either way. Native protocol only.
        approval: A policy deciding which calls need approval: ``(tool_name, arguments)
            -> bool``, called for each call of a ``normal`` turn's reply, whatever source
            the tool comes from (tools with ``requires_approval=True`` need it whatever
            the policy says). When a reply calls one, the run pauses before running any
            call of that turn and returns a paused Step: see :meth:`SubAgent.resume
            <subagent.SubAgent.resume>`.

    Raises:
        ConfigurationError: A value is invalid; the message names the field.
    """

    protocol: ProtocolName = "native"
    parallel_tool_calls: bool = True
    prune_unknown_args: bool = True
    max_tool_result_chars: int = TOOL_RESULT_LIMIT
    max_tool_calls_per_turn: int = TOOL_CALLS_PER_TURN
    keep_tool_schemas: bool = False
    approval: Callable[[str, Mapping[str, Any]], bool] | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.protocol, str) and self.protocol in PROTOCOLS):
            raise ConfigurationError(
                "protocol", f"must be one of {sorted(PROTOCOLS)}, got {self.protocol!r}"
            )
        for flag in ("parallel_tool_calls", "prune_unknown_args", "keep_tool_schemas"):
            check_bool(flag, getattr(self, flag))
        check_int("max_tool_result_chars", self.max_tool_result_chars, 1)
        check_int("max_tool_calls_per_turn", self.max_tool_calls_per_turn, 1)
        if self.approval is not None and not callable(self.approval):
            raise ConfigurationError(
                "approval", f"must be a function (tool_name, arguments) -> bool, got "
                f"{self.approval!r}"
            )  # fmt: skip


@dataclass(frozen=True, slots=True)
class ReplyPolicy:
    """How an agent's replies are read, kept and answered.

    Args:
        context_policy: ``collapse`` (default) keeps only the latest failed attempt of a
            streak in the context; ``accumulate`` keeps all of them; ``quote`` keeps only
            the latest, quoted inside its feedback rather than sent as the model's own turn
            (small models tend to repeat their own last turn word for word).
            ``run(context_policy=...)`` replaces it for one run.
        correct_cut_replies: A reply cut off at the token limit (stop reason ``length``) is
            an error turn asking for a shorter answer, without being parsed (default).
            ``False`` parses it like any reply (a cut reply may still hold a valid answer).
        max_reply_chars: Replies longer than this many characters get feedback without
            being parsed (default 1,000,000, see ``docs/reliability.md``); ``None``: no
            limit.
        allow_fail: Whether the model is offered the explicit fail (``{"fail": "<why>"}``
            ends the run ``failed(explicit_fail)``). ``True``: the system prompt offers it.
            ``None`` (default) or ``False``: it does not, and a fail the model writes
            anyway is fed back as an answer to correct (small models take the offer on
            tasks they can do: docs/evaluation.md). Offer it where a task can have no
            answer, or say "no answer" in the output type.

    Raises:
        ConfigurationError: A value is invalid; the message names the field.
    """

    context_policy: ContextPolicy = "collapse"
    correct_cut_replies: bool = True
    max_reply_chars: int | None = DEFAULT_MAX_REPLY_CHARS
    allow_fail: bool | None = None

    def __post_init__(self) -> None:
        check_policy(self.context_policy)
        check_bool("correct_cut_replies", self.correct_cut_replies)
        if self.max_reply_chars is not None:
            check_int("max_reply_chars", self.max_reply_chars, 1)
        if self.allow_fail is not None:
            check_bool("allow_fail", self.allow_fail)


@dataclass(frozen=True, slots=True)
class Timeouts:
    """An agent's default timeouts (``run(timeout=..., mission_timeout=...)`` replace them).

    Args:
        call: Seconds allowed for one LLM call (the run option ``timeout``).
        run: Seconds allowed for the whole run (the run option ``mission_timeout``).

    Raises:
        ConfigurationError: A value is not a positive number of seconds.
    """

    call: float | None = None
    run: float | None = None

    def __post_init__(self) -> None:
        check_seconds("timeout", self.call)
        check_seconds("mission_timeout", self.run)


# Each keyword SubAgent took before the records, and where it lives now (record field,
# the record's name in the agent, the field's name in the record).
MOVED_KEYWORDS: Final[Mapping[str, tuple[str, str]]] = {
    **{name: ("tool_policy", name) for name in (
        "protocol", "parallel_tool_calls", "prune_unknown_args", "max_tool_result_chars",
        "max_tool_calls_per_turn", "keep_tool_schemas", "approval")},
    **{name: ("reply_policy", name) for name in (
        "context_policy", "correct_cut_replies", "max_reply_chars", "allow_fail")},
    "timeout": ("timeouts", "call"),
    "mission_timeout": ("timeouts", "run"),
}  # fmt: skip
_RECORDS: Final[Mapping[str, type[Any]]] = {
    "tool_policy": ToolPolicy,
    "reply_policy": ReplyPolicy,
    "timeouts": Timeouts,
}


def moved_keywords(given: dict[str, Any], *, warn: bool = True) -> dict[str, Any]:
    """``given`` (an agent's keywords) with the old ones moved into their records.

    A record given as well keeps its other fields; ``parser_kwargs`` becomes a
    ``functools.partial`` of the parser. Each old keyword warns (``warn=False``: an
    evaluation variant, which may name them on purpose).

    Raises:
        ConfigurationError: A moved value is invalid (naming it), or ``parser_kwargs``
            is given without a parser output.
    """
    old = [name for name in given if name in MOVED_KEYWORDS or name == "parser_kwargs"]
    if not old:
        return given
    if warn:
        warnings.warn(
            f"SubAgent({', '.join(f'{name}=' for name in old)}) is deprecated: "
            + "; ".join(_advice(name) for name in old),
            DeprecationWarning,
            stacklevel=3,
        )
    moved = dict(given)
    changes: dict[str, dict[str, Any]] = {}
    for name in old:
        value = moved.pop(name)
        if name == "parser_kwargs":
            moved["output"] = _with_parser_kwargs(moved.get("output"), value)
            continue
        record, field_name = MOVED_KEYWORDS[name]
        changes.setdefault(record, {})[field_name] = value
    for record, fields in changes.items():
        current = moved.get(record)
        moved[record] = (
            _RECORDS[record](**fields)
            if current is None
            else dataclasses.replace(current, **fields)
        )
    return moved


def _advice(name: str) -> str:
    if name == "parser_kwargs":
        return "give output=functools.partial(parser, **kwargs)"
    record, field_name = MOVED_KEYWORDS[name]
    return f"give {record}={_RECORDS[record].__name__}({field_name}=...)"


def _with_parser_kwargs(output: object, kwargs: object) -> object:
    if kwargs is None:
        return output
    if not isinstance(kwargs, Mapping):
        raise ConfigurationError("parser_kwargs", f"must be a mapping, got {kwargs!r}")
    if not callable(output) or isinstance(output, type):
        raise ConfigurationError(
            "parser_kwargs", f"needs a parser output (a function), got {output!r}"
        )
    return functools.partial(output, **kwargs)


def with_fields(agent: AgentT, changes: Mapping[str, Any]) -> AgentT:
    """``agent`` with ``changes``: its fields, or the records' by their old keywords.

    An evaluation variant (``Variant(options={"protocol": "react"})``) names a record's
    field as the agent keyword it was; it changes that field of the agent's record and
    keeps the others, without a warning.
    """
    if not changes:
        return agent
    records = {name: getattr(agent, name) for name in _RECORDS}
    changed: AgentT = dataclasses.replace(
        cast(Any, agent), **moved_keywords({**records, **changes}, warn=False)
    )
    return changed


def flat_fields(agent: object) -> dict[str, Any]:
    """An agent's fields with its records' fields in their place, by their old keywords.

    What a digest of the agent reads, so that the records did not change the digest of
    an agent that sets the same values.
    """
    fields: dict[str, Any] = {
        field.name: getattr(agent, field.name)
        for field in dataclasses.fields(agent)  # type: ignore[arg-type]
        if field.init and field.name not in _RECORDS
    }
    for keyword, (record, name) in MOVED_KEYWORDS.items():
        fields[keyword] = getattr(getattr(agent, record), name)
    output: Any = fields.get("output")
    kwargs = None
    if isinstance(output, functools.partial) and not output.args:
        output, kwargs = output.func, output.keywords
    fields["output"], fields["parser_kwargs"] = output, kwargs
    return fields
