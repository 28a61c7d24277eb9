"""A run's options, spelled once: the keyword arguments, their checks, their resolution.

Each option is spelled in one group below (what it is, its type, its meaning); the
signatures of ``run``, ``resume``, ``start``, ``stream``, ``run_sync``, the batches and Ray
are built from the groups (``**options: Unpack[RunArguments]``), so a type checker checks
every call. :func:`resolve` turns an agent's defaults and a call's arguments into the
run's :class:`~subagent._parts.RunOptions` once, the run's hooks included (approval,
usage limits, ``on_state``, in that order); :func:`opening` makes the task's messages and
the run's system messages.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Generic, cast

from opentelemetry.trace import TracerProvider
from pydantic import BaseModel
from typing_extensions import TypedDict, TypeVar

from subagent._approval import ApprovalHook
from subagent._build import (
    article,
    check_limits,
    check_llm,
    run_parts,
    type_name,
)
from subagent._checks import check_int, check_seconds
from subagent._context import RunContext, takes_run_context
from subagent._conversation import ContextPolicy, check_policy
from subagent._correction import Correction, auto_output
from subagent._definition import AgentDefinition
from subagent._errors import ConfigurationError
from subagent._hooks import NO_HOOKS, Hooks, RunHook
from subagent._limits import UsageLimits, limits_hook
from subagent._nesting import current_depth, current_run_model
from subagent._on_state import StateHook
from subagent._override import NOT_GIVEN, active_override
from subagent._parts import AgentParts, RunOptions, Systems
from subagent.llm import LLM, Message, OutputRequest, RetryPolicy
from subagent.llm._protocol import messages_from
from subagent.observe import EventHandler
from subagent.observe._observer import check_callback
from subagent.records import RunState
from subagent.records._messages import user_message

__all__ = [
    "RUN_OPTIONS",
    "RUN_OPTION_RULES",
    "OptionRule",
    "ResumeArguments",
    "RunArguments",
    "check_option_names",
    "messages_as_given",
    "opening",
    "refuse_untaken",
    "rendered_task",
    "resolve",
    "taken_by",
    "values_of",
]

DepsT = TypeVar("DepsT", default=Any)


class ModelOption(TypedDict, total=False):
    """Which model a run calls.

    Attributes:
        llm: The model, or a spec string such as ``"openai:gpt-4o-mini"`` (default: the
            agent's, else the calling agent's when nested).
    """

    llm: LLM | str | None


class BudgetOptions(TypedDict, total=False):
    """A run's budgets (a resumed run takes them from its state).

    Attributes:
        max_turns: The work budget for this run.
        return_retries: The correction budget for this run.
        context_policy: ``collapse``, ``accumulate`` or ``quote``.
    """

    max_turns: int | None
    return_retries: int | None
    context_policy: ContextPolicy | None


class TaskOptions(TypedDict, total=False):
    """The task as messages instead of the agent's prompt, and the conversation before it.

    Attributes:
        messages: Use these messages as the task instead of rendering ``prompt``. Leading
            system messages extend the agent's system prompt for this run.
        message_history: An earlier conversation the task follows (``step.messages`` of a
            run before: a chat goes on), sent before the task's messages; its system
            messages extend the agent's system prompt, as ``messages``' do.
    """

    messages: Sequence[Message | Mapping[str, Any]] | str | None
    message_history: Sequence[Message | Mapping[str, Any]] | None


class CallOptions(TypedDict, total=False):
    """How the model is called, and how long a run may take.

    Attributes:
        settings: Model settings, merged over the agent's.
        retry_policy: Transport retries for this run.
        timeout: Seconds allowed for one LLM call.
        mission_timeout: Seconds allowed for the whole run (a resumed run: the time it
            has already run included).
        correction: How correction turns differ from the failed attempt (their output
            mode, sampling, model), in place of the agent's :class:`~subagent.Correction`.
    """

    settings: Mapping[str, Any] | None
    retry_policy: RetryPolicy | None
    timeout: float | None
    mission_timeout: float | None
    correction: Correction | None


class ListenerOptions(TypedDict, total=False):
    """Who hears of the run as it goes.

    Attributes:
        tracer_provider: Where spans go (default: the global provider, if configured).
        on_event: Called with each :class:`~subagent.RunEvent`.
        on_text: Stream replies: called with each piece of text as it arrives, when the
            model can stream; otherwise with nothing.
        on_state: Called with the run's :class:`~subagent.RunState` after each turn that
            leaves it going on or paused (to save it, and resume from it); not called, and
            nothing taken, when not given.
        hooks: :class:`~subagent.RunHook` objects for this run, called after the agent's
            own (docs/hooks.md).
    """

    tracer_provider: TracerProvider | None
    on_event: EventHandler | None
    on_text: Callable[[str], object] | None
    on_state: Callable[[RunState], object] | None
    hooks: Sequence[RunHook] | None


class SpendOptions(TypedDict, Generic[DepsT], total=False):
    """What the run's tools get, and what the run may spend.

    Attributes:
        deps: The run's dependencies (a database handle, the caller's user id...), handed
            to tools, validators and ``instructions`` that take a
            :class:`~subagent.RunContext`; never recorded, traced or shown.
        usage_limits: What the run may spend (tokens, tool calls, cost), in place of the
            agent's ``usage_limits``; crossing one ends it ``failed(usage_limit)``.
    """

    deps: DepsT
    usage_limits: UsageLimits | None


class ResumeArguments(ModelOption, CallOptions, ListenerOptions, SpendOptions[DepsT],
                      total=False):  # fmt: skip
    """The keyword arguments of :meth:`SubAgent.resume` (see the groups they come from)."""


class RunArguments(ModelOption, BudgetOptions, TaskOptions, CallOptions, ListenerOptions,
                   SpendOptions[DepsT], total=False):  # fmt: skip
    """The keyword arguments of :meth:`SubAgent.run`: every option of a run.

    Also taken by ``start``, ``stream``, ``run_sync``, ``check_options`` and the batches.
    Each option is documented in its group: :class:`ModelOption`, :class:`BudgetOptions`,
    :class:`TaskOptions`, :class:`CallOptions`, :class:`ListenerOptions`,
    :class:`SpendOptions`.
    """


RUN_OPTIONS: tuple[str, ...] = tuple(RunArguments.__annotations__)


@dataclass(frozen=True, slots=True)
class OptionRule:
    """Where one run option goes: every entry point takes it, or refuses it saying why.

    Each entry point's field is ``None`` where it takes the option, else the reason it
    refuses it (the end of the error's message). The entry points read this table (what
    they accept, what they refuse and why, what a durable run forwards when it resumes),
    and a test checks each one's typed arguments against it: a new option is added here
    and in its group, and nowhere else.

    Attributes:
        resume: :meth:`SubAgent.resume`.
        ray: :func:`subagent.ray.run_on_ray` (``llm`` and ``tracer_provider`` are its own
            parameters there).
        durable: :meth:`DurableAgent.run <subagent.durable.DurableAgent.run>` and
            ``run_many``; what both it and ``resume`` take goes on to a resumed part.
        evals: A variant of an evaluation (``Variant(options=...)``).
        cli: The command line: the flag that gives it (``None`` where none does).
        shapes_runs: Whether it changes what a run does (an evaluation's variant digest
            covers it), rather than where it reports or what it is handed.
    """

    resume: str | None = None
    ray: str | None = None
    durable: str | None = None
    evals: str | None = None
    cli: str | None = None
    shapes_runs: bool = True


_FROM_STATE = "a resumed run takes it from its state"
_IN_WORKERS = "it would run in the workers, out of the caller's sight"
_ELSEWHERE = "a resumed run's listener would be in another process"

RUN_OPTION_RULES: Mapping[str, OptionRule] = MappingProxyType({
    "llm": OptionRule(durable="give the model to DurableAgent(llm=...)", cli="--llm"),
    "max_turns": OptionRule(resume=_FROM_STATE, cli="--max-turns"),
    "return_retries": OptionRule(resume=_FROM_STATE, cli="--return-retries"),
    "context_policy": OptionRule(resume=_FROM_STATE),
    "messages": OptionRule(resume="a resumed run's task is in its state",
                           evals="each case gives its own (Case.messages)"),
    "message_history": OptionRule(resume="a resumed run's conversation is in its state"),
    "settings": OptionRule(cli="--temperature, --max-tokens"),
    "retry_policy": OptionRule(),
    "timeout": OptionRule(durable="give the call timeout to DurableAgent(timeout=...)",
                          cli="--timeout"),
    "mission_timeout": OptionRule(cli="--mission-timeout"),
    "correction": OptionRule(),
    "tracer_provider": OptionRule(durable="give it to DurableAgent(tracer_provider=...)",
                                  cli="--trace", shapes_runs=False),
    "on_event": OptionRule(ray=_IN_WORKERS, durable=_ELSEWHERE, shapes_runs=False),
    "on_text": OptionRule(ray=_IN_WORKERS, durable=_ELSEWHERE, shapes_runs=False),
    "on_state": OptionRule(ray=_IN_WORKERS, durable=_ELSEWHERE, shapes_runs=False),
    "hooks": OptionRule(ray=_IN_WORKERS, durable="a resumed run's hooks would be in "
                        "another process: give them to the agent"),
    "deps": OptionRule(durable="give them to DurableAgent(deps=...): a run resumed in "
                       "another process takes that process's", shapes_runs=False),
    "usage_limits": OptionRule(),
})  # fmt: skip
"""Every run option (:data:`RUN_OPTIONS`), and where it goes (:class:`OptionRule`)."""


def taken_by(entry: str) -> frozenset[str]:
    """The run options entry point ``entry`` (an :class:`OptionRule` field) takes."""
    return frozenset(name for name, rule in RUN_OPTION_RULES.items()
                     if getattr(rule, entry) is None)  # fmt: skip


def refuse_untaken(entry: str, call: str, given: Iterable[str]) -> None:
    """Refuse a run option ``entry`` does not take, naming it and why (its rule's reason).

    Raises:
        TypeError: As Python does for an unexpected keyword argument, with the reason.
    """
    for name in given:
        rule = RUN_OPTION_RULES.get(name)
        reason = None if rule is None else getattr(rule, entry)
        if reason is not None:
            raise TypeError(f"{call} does not take {name}=: {reason}")


def check_option_names(call: str, given: Mapping[str, Any]) -> None:
    """Refuse a keyword that is no run option, naming the public call and the nearest one.

    Raises:
        TypeError: As Python does for an unexpected keyword argument.
    """
    for name in given:
        if name not in RUN_OPTIONS:
            close = difflib.get_close_matches(str(name), RUN_OPTIONS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise TypeError(
                f"{call} got an unexpected keyword argument {name!r}{hint} "
                f"(the run options: {', '.join(RUN_OPTIONS)})"
            )


def resolve(
    agent: AgentDefinition[Any, Any], given: Mapping[str, Any], parts: AgentParts | None = None
) -> RunOptions:
    """The options of one run of ``agent``: its defaults, overridden by ``given``.

    ``parts``: the run's parts (:func:`run_parts`), whose approval rule the run's hooks
    apply; ``None``: the agent's own (options checked, not run).

    Raises:
        ConfigurationError: An option is invalid (nothing was sent to the model).
    """
    parent_llm, parent_provider = current_run_model()
    override = active_override(agent)
    if override is not None and override.deps is not NOT_GIVEN:
        given = {**given, "deps": override.deps}
    # The agent's own model was checked when it was built (a spec string is an LLMSpec).
    model = (
        (override.llm if override is not None else None) or check_llm(given.get("llm"))
        or cast(LLM | None, agent.llm) or parent_llm
    )  # fmt: skip
    if model is None:
        raise ConfigurationError(
            "llm", f"agent {agent.name!r} has no model: pass llm= to SubAgent or to run()"
        )
    settings = given.get("settings")
    if settings is not None and not isinstance(settings, Mapping):
        raise ConfigurationError("settings", f"must be a mapping, got {settings!r}")
    retry_policy = given.get("retry_policy")
    if retry_policy is not None and not isinstance(retry_policy, RetryPolicy):
        raise ConfigurationError("retry_policy", f"must be a RetryPolicy, got {retry_policy!r}")
    for name in ("on_event", "on_text", "on_state"):
        check_callback(name, given.get(name))
    deps = given.get("deps")
    if deps is not None or agent.deps_type is not None:
        _check_deps(agent, deps)
    limits = given.get("usage_limits")
    check_limits("usage_limits", limits)
    options = RunOptions(
        llm=model,
        max_turns=_given_int(given, "max_turns", agent.max_turns, 1),
        return_retries=_given_int(given, "return_retries", agent.return_retries, 0),
        context_policy=_given(
            given, "context_policy", agent.reply_policy.context_policy, check_policy
        ),
        retry_policy=retry_policy or agent.retry_policy,
        timeout=_given_seconds(given, "timeout", agent.timeouts.call),
        mission_timeout=_given_seconds(given, "mission_timeout", agent.timeouts.run),
        settings={**agent.settings, **settings} if settings else agent._settings,
        keep_tool_schemas=agent.tool_policy.keep_tool_schemas,
        tracer_provider=given.get("tracer_provider") or parent_provider,
        on_event=given.get("on_event"),
        on_text=given.get("on_text"),
        deps=deps,
        on_state=given.get("on_state"),
        message_history=given.get("message_history"),
    )
    own: Sequence[RunHook] = agent.hooks
    extra = given.get("hooks")
    if extra:
        own = (*own, *extra)
    correction = given.get("correction")
    _correct(agent, options, agent.correction if correction is None else correction)
    # After the correction: the limits price its model too.
    options.hooks = _hooks(agent._parts if parts is None else parts, options,
                           agent.usage_limits if limits is None else limits, own)  # fmt: skip
    return options


def _correct(agent: AgentDefinition[Any, Any], options: RunOptions, correction: object) -> None:
    """Resolve how the run's correction turns are sent (its model, settings, output mode).

    Neither the agent nor the run giving one, the run takes the agent's default
    (:func:`~subagent._correction.default_correction`, resolved once per agent).

    Raises:
        ConfigurationError: ``correction`` is not a :class:`Correction`, names a model that
            is none, or asks for an output mode the agent's output cannot have.
    """
    if correction is None:
        parts = agent._parts
        if parts.default_correction is not None:  # None: an untyped output, nothing differs
            options.correction = parts.default_correction
            options.correction_llm = options.llm
            options.correction_settings = options.settings
            options.correction_output = parts.default_output
        return
    if not isinstance(correction, Correction):
        raise ConfigurationError("correction", f"must be a Correction or None, got {correction!r}")
    options.correction = correction
    options.correction_llm = check_llm(correction.llm, "correction.llm") or options.llm
    options.correction_settings = {**options.settings, **correction.settings}
    mode = correction.output
    if mode is None or mode == "text":
        return
    parts = agent._parts
    given = correction.json_schema
    schema = dict(given) if given is not None else parts.contract.json_schema
    if mode == "auto":  # the output's own schema: the agent's request, made when it was built
        options.correction_output = parts.default_output if given is None else auto_output(schema)
        return
    if schema is None:
        raise ConfigurationError(
            "correction.output",
            f"{mode!r} sends the output's JSON schema, and agent {agent.name!r} has none: "
            f"give it a typed output (a pydantic model or a type), give "
            f"correction.json_schema, or use output='text' or 'auto'",
        )
    options.correction_output = OutputRequest(
        mode=mode, json_schema=schema, name="final_answer",
        description="Give your final answer: its arguments are the answer.",
    )  # fmt: skip


def _given(given: Mapping[str, Any], name: str, default: Any, check: Callable[[Any], Any]) -> Any:
    value = given.get(name)
    return default if value is None else check(value)


def _given_int(given: Mapping[str, Any], name: str, default: int, least: int) -> int:
    value = given.get(name)
    return default if value is None else check_int(name, value, least)


def _given_seconds(given: Mapping[str, Any], name: str, default: float | None) -> float | None:
    value = given.get(name)
    return default if value is None else check_seconds(name, value)


def _hooks(
    parts: AgentParts, options: RunOptions, limits: UsageLimits | None, own: Sequence[RunHook]
) -> Hooks:
    """A run's hooks, in their fixed order.

    Approval, usage limits, the agent's and the run's own (``own``), then ``on_state``.

    Raises:
        ConfigurationError: One of ``own`` is not a hook, or asks for what it is not given.
    """
    hooks: list[RunHook] = []
    if parts.approval is not None:
        hooks.append(ApprovalHook(parts.approval, parts.templates))
    limited = limits_hook(limits, parts.name, options.llm, options.correction_llm)
    if limited is not None:
        hooks.append(limited)
    hooks.extend(own)
    if options.on_state is not None:
        hooks.append(StateHook(options.on_state))
    return Hooks(hooks) if hooks else NO_HOOKS


def _check_deps(agent: AgentDefinition[Any, Any], deps: object) -> None:
    """Refuse a run without the deps the agent declared, or with deps of another type.

    Raises:
        ConfigurationError: Naming the agent, the type and what was given.
    """
    expected = agent.deps_type
    if expected is None:
        return
    if deps is None:
        raise ConfigurationError(
            "deps",
            f"agent {agent.name!r} declares deps_type={type_name(expected)}: pass deps= to the run",
        )
    if isinstance(expected, type):
        try:
            fits = isinstance(deps, expected)
        except TypeError:  # a Protocol that is not runtime-checkable: not checked
            fits = True
        if not fits:
            raise ConfigurationError(
                "deps",
                f"agent {agent.name!r} declares deps_type={type_name(expected)}, got "
                f"{article(type(deps).__name__)} instance",
            )


# --- the task's messages and the run's system messages -----------------------------------


def opening(
    agent: AgentDefinition[Any, Any],
    context: Mapping[str, Any] | BaseModel | None,
    messages: Sequence[Message | Mapping[str, Any]] | str | None,
    options: RunOptions | None = None,
    parts: AgentParts | None = None,
) -> tuple[list[Message], AgentParts, Systems]:
    """A run's task messages, the parts it runs with, and its system messages.

    ``parts``: the run's parts when resolved already (:func:`run_parts`).

    The system messages are the agent's, then the text of its ``instructions`` function
    for this run, then any system text the caller's messages bring.

    Raises:
        ConfigurationError: The messages are invalid, or the prompt is empty and no
            messages were given.
        MissingVariableError: The prompt needs a variable the context lacks.
    """
    if parts is None:
        parts = run_parts(agent)
    systems = parts.systems
    if callable(agent.instructions):
        extra = _run_instructions(agent, context, options)
        if extra:
            systems = systems.extended(extra)
    history: list[Message] = []
    earlier = None if options is None else options.message_history
    if earlier:
        history, systems = _history(earlier, systems)
    if messages is None:
        return [*history, *rendered_task(agent, context)], parts, systems
    given, systems = messages_as_given(messages, systems)
    return [*history, *given], parts, systems


def _history(
    earlier: Sequence[Message | Mapping[str, Any]], systems: Systems
) -> tuple[list[Message], Systems]:
    """An earlier conversation, its system messages moved into ``systems``.

    Raises:
        ConfigurationError: It is not a list of messages.
    """
    if isinstance(earlier, str):
        raise ConfigurationError("message_history", "must be a list of messages, not a string")
    try:
        history = messages_from(earlier)
    except Exception as exc:
        raise ConfigurationError("message_history", f"invalid messages: {exc}") from exc
    extra = "\n\n".join(m.content for m in history if m.role == "system")
    if extra:
        systems = systems.extended(extra)
    return [m for m in history if m.role != "system"], systems


def rendered_task(
    agent: AgentDefinition[Any, Any], context: Mapping[str, Any] | BaseModel | None
) -> list[Message]:
    """The task as the agent's prompt rendered with ``context``.

    Raises:
        ConfigurationError: The prompt is empty.
        MissingVariableError: The prompt needs a variable the context lacks.
    """
    if not agent.prompt.strip():
        raise ConfigurationError(
            "prompt", f"agent {agent.name!r} has an empty prompt and no messages were given"
        )
    return [user_message(agent._task.render(values_of(context)).strip())]


def messages_as_given(
    messages: Sequence[Message | Mapping[str, Any]] | str, systems: Systems
) -> tuple[list[Message], Systems]:
    """The caller's messages, their leading system text moved into ``systems``.

    Raises:
        ConfigurationError: The messages are invalid or empty.
    """
    try:
        given = messages_from(messages)
    except Exception as exc:
        raise ConfigurationError("messages", f"invalid messages: {exc}") from exc
    if not given:
        raise ConfigurationError("messages", "must not be empty")
    if given[0].role != "system":
        return given, systems
    # The caller's system text extends the agent's system prompt: one system message per
    # request, in every phase.
    extra = "\n\n".join(m.content for m in given if m.role == "system")
    given = [m for m in given if m.role != "system"]
    if not given:
        raise ConfigurationError("messages", "needs a message besides the system one")
    return given, systems.extended(extra)


def _run_instructions(
    agent: AgentDefinition[Any, Any],
    context: Mapping[str, Any] | BaseModel | None,
    options: RunOptions | None,
) -> str:
    """The text of ``instructions=`` for one run, from its context (and its deps)."""
    function = cast(Callable[..., object], agent.instructions)
    if takes_run_context(function):
        max_turns = agent.max_turns if options is None else options.max_turns
        phase = "normal" if max_turns > 1 else "must_return"
        deps = None if options is None else options.deps
        run = RunContext(deps=deps, agent=agent.name, turn=0, phase=phase,
                         depth=current_depth() + 1)  # fmt: skip
        text = function(run, values_of(context))
    else:
        text = function(values_of(context))
    if not isinstance(text, str):
        raise ConfigurationError(
            "instructions",
            f"the function must return a string, got {text!r} ({type(text).__name__})",
        )
    return text.strip()


def values_of(context: Mapping[str, Any] | BaseModel | None) -> Mapping[str, Any]:
    """The values a run's prompt is rendered with (and ``instructions=`` is called with).

    Raises:
        ConfigurationError: ``context`` is neither a mapping nor a pydantic model.
    """
    if isinstance(context, BaseModel):
        return context.model_dump()
    if context is None:
        return {}
    if isinstance(context, Mapping):
        return context
    hint = (
        ": to send this text as the task, pass it as messages= (run(messages=...)); "
        "to fill the prompt's variables, pass context={name: value}"
        if isinstance(context, str)
        else ""
    )
    raise ConfigurationError(
        "context", f"must be a mapping or a pydantic model, got {type(context).__name__}{hint}"
    )
