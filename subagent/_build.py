"""Building an agent's parts from its definition, once: checks, templates, tools, prompts.

:func:`build` checks a :class:`~subagent.SubAgent`'s fields (a bad value fails here, naming
the field) and prepares what every run of it shares (:class:`~subagent._parts.AgentParts`):
the templates with their overrides, the output contract, the toolbox, the protocol and the
system prompts. What tools make (the toolbox, the system prompts that list it, the
approval rule) is built from one set of tools, always together (``_ToolParts``): the
plain tools here, and for an agent with tool sources (MCP servers) each listing again in a
``SourcedParts`` (``_parts``), when a source's tool list moves; :func:`run_parts` is the
parts one run starts with.
:func:`fingerprint` digests what a resuming agent must share with the one that saved a
state.
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, cast

from subagent._approval import approval_rule
from subagent._checks import check_int
from subagent._context import takes_run_context
from subagent._correction import Correction, auto_output, default_correction
from subagent._definition import AgentDefinition
from subagent._errors import ConfigurationError, StateMismatchError, TemplateError
from subagent._hooks import Hooks
from subagent._limits import UsageLimits
from subagent._parts import AgentParts, SourcedParts, Systems, ToolParts
from subagent._policies import ReplyPolicy, Timeouts, ToolPolicy
from subagent._templates import Template, TemplateSet, default_templates
from subagent.llm import LLM, LLMSpec, Message, RetryPolicy, ToolCall
from subagent.parsers import OutputContract, build_contract
from subagent.protocols import PROTOCOLS
from subagent.protocols._protocol import ReplyProtocol
from subagent.records import RunState, digest
from subagent.tools import SourceNotReadyError, Tool
from subagent.tools._execute import Toolbox
from subagent.tools._source import AgentTools, split_sources
from subagent.tools._tool import build_tools

__all__ = [
    "Built",
    "article",
    "build",
    "check_limits",
    "check_llm",
    "check_state",
    "current_approval",
    "fingerprint",
    "is_type_form",
    "parser_and_kwargs",
    "run_parts",
    "type_name",
]


class Built(NamedTuple):
    """What :func:`build` prepared for an agent."""

    parts: AgentParts
    task: Template
    sources: SourcedParts | None
    settings: dict[str, Any]


def build(agent: AgentDefinition[Any, Any]) -> Built:
    """Check ``agent``'s fields and prepare the parts its runs share.

    Raises:
        ConfigurationError: A field is invalid; the message names it.
    """
    _check_fields(agent)
    try:
        templates = default_templates().with_overrides(agent.prompts)
    except TemplateError as exc:
        raise ConfigurationError("prompts", str(exc)) from exc
    try:
        task = Template("prompt", agent.prompt)
        task.check_partials(())
    except TemplateError as exc:
        raise ConfigurationError("prompt", str(exc)) from exc
    plain, sources = split_sources(agent.tools)
    tools = build_tools(plain)
    _check_output(agent.output)
    tool_policy, reply_policy = agent.tool_policy, agent.reply_policy
    parser, parser_kwargs = parser_and_kwargs(agent.output)
    contract = build_contract(parser, parser_kwargs,
                              max_reply_chars=reply_policy.max_reply_chars)  # fmt: skip
    protocol = PROTOCOLS[tool_policy.protocol]  # checked by the ToolPolicy
    allow_fail = may_fail(agent)
    tool_parts = _ToolParts(agent, templates, protocol, contract, allow_fail)
    schema = contract.json_schema
    parts = AgentParts(
        name=agent.name, templates=templates, contract=contract,
        protocol=protocol, parallel_tool_calls=tool_policy.parallel_tool_calls,
        correct_cut_replies=reply_policy.correct_cut_replies,
        validators=tuple(agent.validators),
        allow_fail=allow_fail,
        validators_take_context=any(takes_run_context(v) for v in agent.validators),
        fingerprint=_Once(functools.partial(fingerprint, agent)),
        default_correction=default_correction(schema),
        default_output=auto_output(schema),
        **tool_parts(tools)._asdict(),
    )  # fmt: skip
    sourced = None
    if sources:
        sourced = SourcedParts(AgentTools(tools, sources), parts, tool_parts)
        sourced.check_now()
    return Built(parts, task, sourced, dict(agent.settings))


def run_parts(agent: AgentDefinition[Any, Any]) -> AgentParts:
    """The parts of a run of ``agent`` starting now, its tools resolved once.

    An agent with tool sources gets the parts of its sources' current listings (every
    tool the run starts with, its approval rule and system prompts made from them);
    another its own parts.

    Raises:
        ConfigurationError: A source is not ready, or two tools share a name.
    """
    sourced = agent._sources
    return agent._parts if sourced is None else sourced.parts()


def current_approval(agent: AgentDefinition[Any, Any]) -> Callable[[ToolCall], bool] | None:
    """The approval rule of a run of ``agent`` starting now (``None``: no call needs one).

    Its sources' tools count once they are listed; while a source is not connected, the
    plain tools' rule (the source's tools are judged when a run reads them).
    """
    try:
        return run_parts(agent).approval
    except SourceNotReadyError:
        return agent._parts.approval


def _check_fields(agent: AgentDefinition[Any, Any]) -> None:
    """The checks of the fields that need no part built."""
    if isinstance(agent.hooks, str | bytes) or not isinstance(agent.hooks, Sequence):
        raise ConfigurationError("hooks", f"must be a list of RunHook, got {agent.hooks!r}")
    Hooks(agent.hooks)  # each a RunHook whose methods ask only for what they are given
    if not isinstance(agent.name, str) or not agent.name.strip():
        raise ConfigurationError("name", f"must be a non-empty string, got {agent.name!r}")
    if not isinstance(agent.prompt, str):
        raise ConfigurationError("prompt", f"must be a Mustache string, got {agent.prompt!r}")
    check_int("max_turns", agent.max_turns, 1)
    check_int("return_retries", agent.return_retries, 0)
    for name, kind in (("tool_policy", ToolPolicy), ("reply_policy", ReplyPolicy),
                       ("timeouts", Timeouts)):  # fmt: skip
        if not isinstance(getattr(agent, name), kind):
            raise ConfigurationError(
                name, f"must be a {kind.__name__}, got {getattr(agent, name)!r}"
            )
    if not isinstance(agent.retry_policy, RetryPolicy):
        raise ConfigurationError(
            "retry_policy", f"must be a RetryPolicy, got {agent.retry_policy!r}"
        )
    if not isinstance(agent.settings, Mapping):
        raise ConfigurationError("settings", f"must be a mapping, got {agent.settings!r}")
    check_limits("usage_limits", agent.usage_limits)
    if agent.deps_type is not None and not is_type_form(agent.deps_type):
        raise ConfigurationError(
            "deps_type", f"must be a type (the class of the run's deps), got {agent.deps_type!r}"
        )
    for validator in agent.validators:
        if not callable(validator):
            raise ConfigurationError("validators", f"{validator!r} is not callable")
    instructions = agent.instructions
    if not (instructions is None or isinstance(instructions, str) or callable(instructions)):
        raise ConfigurationError(
            "instructions",
            f"must be a string or a function of the run's context returning one, "
            f"got {instructions!r}",
        )
    if agent.correction is not None and not isinstance(agent.correction, Correction):
        raise ConfigurationError(
            "correction", f"must be a Correction or None, got {agent.correction!r}"
        )


class _ToolParts:
    """The parts of an agent that depend on its tools, built from one set of tools.

    The toolbox (what the model is offered and what runs), the system prompts that list
    it and the approval rule that judges its calls come from the same tools, always
    together: the agent's plain tools when it is built, and each listing of its sources
    (every tool a run starts with) in :class:`~subagent._parts.SourcedParts`.
    """

    __slots__ = ("_agent", "_allow_fail", "_contract", "_protocol", "_static", "_templates")

    def __init__(
        self,
        agent: AgentDefinition[Any, Any],
        templates: TemplateSet,
        protocol: ReplyProtocol,
        contract: OutputContract,
        allow_fail: bool,
    ):
        self._agent = agent
        self._allow_fail = allow_fail
        self._templates = templates
        self._protocol = protocol
        self._contract = contract
        instructions = agent.instructions
        self._static = instructions.strip() if isinstance(instructions, str) else ""

    def __call__(self, tools: Mapping[str, Tool]) -> ToolParts:
        policy = self._agent.tool_policy
        toolbox = Toolbox(tools, self._templates, prune_unknown_args=policy.prune_unknown_args,
                          result_limit=policy.max_tool_result_chars,
                          call_limit=policy.max_tool_calls_per_turn)  # fmt: skip
        return ToolParts(
            toolbox=toolbox,
            systems=Systems(self._system(toolbox, True), self._system(toolbox, False)),
            approval=approval_rule(tools, policy.approval, policy.prune_unknown_args),
        )

    def _system(self, toolbox: Toolbox, with_tools: bool) -> Message:
        listed = toolbox.definitions if with_tools else []
        text = self._protocol.system_prompt(
            self._templates, self._agent.name, listed, self._contract,
            allow_fail=self._allow_fail,
        )  # fmt: skip
        if self._static:
            text = f"{text}\n\n{self._static}"
        return Message(role="system", content=text)


class _Once:
    """A zero-argument function's value, computed on first use and kept.

    Unlike ``functools.cache`` of a bound method, it pickles (Ray sends agents to workers),
    as the function and not the value.
    """

    __slots__ = ("_function", "_value")

    def __init__(self, function: Callable[[], dict[str, str]]) -> None:
        self._function = function
        self._value: dict[str, str] | None = None

    def __call__(self) -> dict[str, str]:
        if self._value is None:
            self._value = self._function()
        return self._value

    def __getstate__(self) -> tuple[Callable[[], dict[str, str]], None]:
        return (self._function, None)

    def __setstate__(self, state: tuple[Callable[[], dict[str, str]], None]) -> None:
        self._function, self._value = state


# --- what a resuming agent must share with the saving one -------------------------------


def parser_and_kwargs(output: Any) -> tuple[Any, Mapping[str, Any] | None]:
    """A parser output given as ``functools.partial(parser, **kwargs)``, taken apart.

    The parser and its keyword arguments, as the output contract and the fingerprint read
    them (a partial of a parser is how its keyword arguments are given); any other output
    as it is, with none.
    """
    if isinstance(output, functools.partial) and not output.args:
        return output.func, output.keywords
    return output, None


def may_fail(agent: AgentDefinition[Any, Any]) -> bool:
    """Whether the agent's model is offered the explicit fail (``allow_fail``, resolved).

    Only when asked (``True``); ``None`` and ``False`` do not offer it. Small models take
    the offer on tasks they can do (docs/evaluation.md, "The explicit fail, from these
    records"): the 0.5B on 19 of 22 trivial chat questions, and on BFCL a tool agent without
    it answered 46 held-out requests against 36 with it.
    """
    return agent.reply_policy.allow_fail is True


def fingerprint(agent: AgentDefinition[Any, Any]) -> dict[str, str]:
    """Digests of what a resuming agent must share with the saving one."""
    parts = agent._parts
    parser, parser_kwargs = parser_and_kwargs(agent.output)
    output: object
    if parser is None or parser is str:
        output = "text"
    elif is_type_form(parser):
        output = parts.contract.identity(parts.templates)
    else:
        output = _qualified(parser)
    tools = [
        [tool.name, tool.description, definition.parameters, tool.requires_approval]
        for tool, definition in zip(
            parts.toolbox.tools.values(), parts.toolbox.definitions, strict=True
        )
    ]
    instructions = agent.instructions
    approval = agent.tool_policy.approval
    return {
        "output": digest([output, [_qualified(v) for v in agent.validators],
                          dict(parser_kwargs or {})]),
        "tools": digest([tools, None if approval is None else _qualified(approval)]),
        "prompts": digest([agent.prompt, dict(agent.prompts), instructions
                           if instructions is None or isinstance(instructions, str)
                           else _qualified(instructions),
                           # as before the switch where the fail is offered
                           *([] if parts.allow_fail else ["no explicit fail"])]),
        "protocol": digest(agent.tool_policy.protocol),
    }  # fmt: skip


_PART_HINTS = {
    "output": "output type or parser (and its keyword arguments), validators",
    "tools": "tool names, descriptions, schemas, which need approval, the approval policy",
    "prompts": "the task prompt, template overrides, instructions",
    "protocol": "native or react",
}


def check_state(agent: AgentDefinition[Any, Any], state: RunState) -> None:
    """Refuse a state ``agent`` did not save (or could not have saved).

    Raises:
        StateMismatchError: Naming the part that differs.
    """
    if state.agent != agent.name:
        raise StateMismatchError(
            "agent", f"the state is of agent {state.agent!r}, not {agent.name!r}"
        )
    mine = agent._parts.fingerprint()
    for part in sorted(set(mine) | set(state.fingerprint)):
        if mine.get(part) != state.fingerprint.get(part):
            raise StateMismatchError(
                part,
                f"agent {agent.name!r} has another {part} than the agent that saved the "
                f"state ({_PART_HINTS.get(part, part)}); resume it with the same "
                f"definition",
            )


def _qualified(value: object) -> str:
    """A function's or type's module and qualified name (its identity across processes)."""
    module = getattr(value, "__module__", "") or ""
    name = getattr(value, "__qualname__", None) or repr(value)
    return f"{module}.{name}"


# --- checks of single values ---------------------------------------------------------------


def check_limits(name: str, value: object) -> None:
    """Refuse anything but a :class:`~subagent.UsageLimits` (or ``None``)."""
    if value is not None and not isinstance(value, UsageLimits):
        raise ConfigurationError(name, f"must be a UsageLimits or None, got {value!r}")


# Model classes already checked: a run checks its model by class, not by inspection each time.
_LLM_CLASSES: set[type] = set()


def check_llm(value: object, name: str = "llm") -> LLM | None:
    """A model: an :class:`~subagent.llm.LLM`, or a spec string made an ``LLMSpec``.

    Raises:
        ConfigurationError: ``value`` has no ``async def complete(request)``.
    """
    if value is None:
        return None
    if isinstance(value, str):  # "openai:gpt-4o-mini", the SUBAGENT_LLM forms
        return LLMSpec(value, field=name)
    kind = type(value)
    if kind in _LLM_CLASSES:
        return cast(LLM, value)
    if not inspect.iscoroutinefunction(getattr(value, "complete", None)):
        raise ConfigurationError(
            name, f"{value!r} is not an LLM: it needs an `async def complete(request)` method"
        )
    # Only a class whose complete() is a coroutine function for every instance is cached.
    if inspect.iscoroutinefunction(getattr(kind, "complete", None)) and len(_LLM_CLASSES) < 256:
        _LLM_CLASSES.add(kind)
    return cast(LLM, value)


def article(noun: str) -> str:
    """``a noun`` or ``an noun``."""
    return f"an {noun}" if noun[:1].lower() in "aeiou" else f"a {noun}"


def type_name(kind: object) -> str:
    """A type's name, for messages."""
    return getattr(kind, "__name__", None) or repr(kind)


def is_type_form(output: object) -> bool:
    """Whether ``output`` can be a type to validate against (not a value such as ``42``)."""
    return (
        inspect.isclass(output)
        or typing.get_origin(output) is not None
        or isinstance(output, types.UnionType | typing.TypeVar | typing.ForwardRef)
        or type(output).__name__ == "TypeAliasType"
    )


def _check_output(output: object) -> None:
    """Refuse an ``output`` that is a value, not a type or a parser (before pydantic does).

    Raises:
        ConfigurationError: ``output`` is an instance (``42``, ``Answer(...)``).
    """
    if output is None or callable(output) or is_type_form(output):
        return
    raise ConfigurationError(
        "output",
        f"must be a type (a pydantic model such as Answer, or a type such as int or "
        f"list[str]), None or str for text, or a parser function; got {output!r}, "
        f"{article(type(output).__name__)} instance (pass its class: "
        f"output={type(output).__name__})",
    )
