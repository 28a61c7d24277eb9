"""``SubAgent``: an immutable agent definition, and ``run`` / ``run_sync``."""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import inspect
import re
import time
import types
import typing
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Generic, TypedDict, cast

import anyio
import sniffio
from opentelemetry.trace import TracerProvider
from pydantic import BaseModel
from typing_extensions import TypeVar, Unpack

from subagent._checks import check_int, check_seconds
from subagent._context import RunContext, takes_run_context
from subagent._conversation import CONTEXT_POLICIES, ContextPolicy
from subagent._errors import ConfigurationError, StateMismatchError, TemplateError
from subagent._handle import AgentRun
from subagent._limits import UsageLimits
from subagent._records import FailReason, Failure, Step, build_step, user_message
from subagent._run import AgentParts, RunOptions, current_depth, current_run_model, execute_run
from subagent._state import Decision, RunState, digest
from subagent._templates import Template, default_templates
from subagent.llm import LLM, LLMSpec, Message, RetryPolicy, ToolCall, messages_from
from subagent.observe import EventHandler, check_callback
from subagent.parsers import DEFAULT_MAX_REPLY_CHARS, OutputParser, build_contract
from subagent.protocols import PROTOCOLS, ProtocolName, ReplyProtocol
from subagent.tools import (
    TOOL_CALLS_PER_TURN,
    TOOL_RESULT_LIMIT,
    AgentTools,
    NestedRunError,
    SourceNotReadyError,
    Tool,
    Toolbox,
    ToolOutput,
    ToolSource,
    build_tools,
    split_sources,
)

__all__ = ["SubAgent"]

# Defaults to Any: agents with a text or parser output are SubAgent[Any]; with a model or
# type output, SubAgent[Model].
OutputT = TypeVar("OutputT", default=Any)
# The run's deps, second so that SubAgent[Model] keeps meaning what it meant; Any (not
# declared) unless the agent names its deps_type.
DepsT = TypeVar("DepsT", default=Any)

_POLICIES = CONTEXT_POLICIES
_PASS_DOWN: Any = object()  # as_tool(deps=...) not given: the calling run's deps


def _check_policy(value: object) -> ContextPolicy:
    for policy in _POLICIES:
        if value == policy:
            return policy
    raise ConfigurationError("context_policy", f"must be one of {_POLICIES}, got {value!r}")


class _Once:
    """A zero-argument function's value, computed on first use and kept.

    Unlike ``functools.cache`` of a bound method, it pickles (Ray sends agents to workers),
    as the method and not the value.
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


class RunArguments(TypedDict, total=False):
    """The keyword arguments of :meth:`SubAgent.run` (also taken by ``start`` and ``stream``)."""

    llm: LLM | str | None
    max_turns: int | None
    return_retries: int | None
    messages: Sequence[Message | Mapping[str, Any]] | str | None
    context_policy: ContextPolicy | None
    settings: Mapping[str, Any] | None
    retry_policy: RetryPolicy | None
    timeout: float | None
    mission_timeout: float | None
    tracer_provider: TracerProvider | None
    on_event: EventHandler | None
    on_text: Callable[[str], object] | None
    deps: Any
    usage_limits: UsageLimits | None
    on_state: Callable[[RunState], object] | None


_RUN_OPTIONS: tuple[str, ...] = tuple(RunArguments.__annotations__)


def _check_option_names(call: str, given: Mapping[str, Any]) -> None:
    """Refuse a keyword that is no run option, naming the public call and the nearest one.

    Raises:
        TypeError: As Python does for an unexpected keyword argument.
    """
    for name in given:
        if name not in _RUN_OPTIONS:
            close = difflib.get_close_matches(str(name), _RUN_OPTIONS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise TypeError(
                f"{call} got an unexpected keyword argument {name!r}{hint} "
                f"(the run options: {', '.join(_RUN_OPTIONS)})"
            )


# The rule Tool applies to names (subagent/tools); here to suggest one before Tool refuses.
_TOOL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")


def _tool_name_from(name: str) -> str:
    """A valid tool name close to an agent's name: other characters become ``_``."""
    cleaned = re.sub(r"[^A-Za-z0-9_-]+", "_", name.strip()).strip("_") or "agent"
    if not (cleaned[0].isalpha() or cleaned[0] == "_"):
        cleaned = f"_{cleaned}"
    return cleaned[:64]


def _article(noun: str) -> str:
    return f"an {noun}" if noun[:1].lower() in "aeiou" else f"a {noun}"


def _is_type_form(output: object) -> bool:
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
    if output is None or callable(output) or _is_type_form(output):
        return
    raise ConfigurationError(
        "output",
        f"must be a type (a pydantic model such as Answer, or a type such as int or "
        f"list[str]), None or str for text, or a parser function; got {output!r}, "
        f"{_article(type(output).__name__)} instance (pass its class: "
        f"output={type(output).__name__})",
    )


def _check_protocol(value: object) -> ReplyProtocol:
    protocol = PROTOCOLS.get(value) if isinstance(value, str) else None
    if protocol is None:
        raise ConfigurationError("protocol", f"must be one of {sorted(PROTOCOLS)}, got {value!r}")
    return protocol


# Model classes already checked: a run checks its model by class, not by inspection each time.
_LLM_CLASSES: set[type] = set()


def _check_llm(value: object, name: str = "llm") -> LLM | None:
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


def _extend(system: Message, extra: str) -> Message:
    return Message(role="system", content=f"{system.content}\n\n{extra}")


@dataclass(frozen=True, eq=False)
class SubAgent(Generic[OutputT, DepsT]):
    """An agent definition: what to do, what to return, with which tools and budgets.

    Immutable and safe to share across concurrent runs; every run gets its own books.

    Args:
        name: The agent's name (in prompts, traces and records).
        prompt: The task, a Mustache template rendered with the run's context.
        output: What a valid answer is: a pydantic model or type (JSON is extracted from the
            reply and validated), ``None``/``str`` (the reply's text), or a parser
            ``(text, **kwargs) -> ParseResult``.
        tools: Callables (sync or async) or :class:`Tool` objects, offered in ``normal``
            turns only; and tool sources such as MCP servers (``subagent.mcp``), whose
            current tools each run reads when it starts (see ``docs/mcp.md``).
        llm: The default model: an :class:`~subagent.llm.LLM`, or a spec string in the
            forms of ``SUBAGENT_LLM`` (``"openai:gpt-4o-mini"``,
            ``"openai:MODEL@http://127.0.0.1:8080/v1"``), which becomes an
            :class:`~subagent.llm.LLMSpec` (an adapter opened for each call).
        max_turns: The work budget: turns that may use tools (>= 1).
        return_retries: The correction budget: extra turns granted only after the final work
            turn produced an invalid answer (>= 0).
        context_policy: ``collapse`` (default) keeps only the latest failed attempt of a
            streak in the context; ``accumulate`` keeps all of them; ``quote`` keeps only
            the latest, quoted inside its feedback rather than sent as the model's own turn
            (small models tend to repeat their own last turn word for word).
        validators: Checks run on the parsed output: ``(output) -> Validation`` or
            ``{"valid": bool, "errors": [...]}``, sync or async; ``(ctx, output)`` when the
            first parameter is annotated :class:`~subagent.RunContext`.
        parser_kwargs: Keyword arguments for a parser ``output``.
        prompts: Template overrides by name (``system``, ``retry_feedback``...).
        settings: Model settings passed to the LLM (``temperature``, ``max_tokens``...).
        retry_policy: Transport retries of a failed LLM call.
        timeout: Seconds allowed for one LLM call.
        mission_timeout: Seconds allowed for the whole run.
        keep_tool_schemas: Keep tool schemas in ``must_return``/``retry`` requests and ask
            for ``tool_choice="none"`` (friendlier to prompt caches); calls are refused either
            way. Native protocol only.
        description: What the agent does, when it is used as a tool of another agent.
        protocol: How tools travel: ``native`` (the model's own tool calling, the default)
            or ``react`` (tools described in the prompt, one action per reply, read from
            the text; for models without reliable tool calling).
        parallel_tool_calls: Run the calls of one reply concurrently (default); ``False``
            runs them one after another, in order.
        prune_unknown_args: Drop arguments a tool does not take, recording their names on
            the turn and the tool span (default); ``False`` reports them to the model as
            invalid. A :class:`Tool` may set its own.
        max_tool_result_chars: Characters of a tool's result the model is shown; the rest
            is cut, with a note saying how much.
        max_tool_calls_per_turn: Tool calls of one reply that are run (default 32); the
            calls past them are refused, never run, and the model is told only the first
            ones ran (``error_type="too_many_calls"``).
        correct_cut_replies: A reply cut off at the token limit (stop reason ``length``) is
            an error turn asking for a shorter answer, without being parsed (default).
            ``False`` parses it like any reply (a cut reply may still hold a valid answer).
        max_reply_chars: Replies longer than this many characters get feedback without
            being parsed (default 1,000,000, see ``docs/reliability.md``); ``None``: no
            limit.
        instructions: Your own system prompt text, added after the runtime's (which keeps
            the tools and the answer's format): a string, used as it is, or a function of
            the run's context (the values the prompt is rendered with; ``{}`` when there
            are none) returning a string, called once per run before anything is sent.
            A function whose first parameter is annotated :class:`~subagent.RunContext`
            is called ``(ctx, values)`` (``ctx.turn`` is 0).
        deps_type: The type of the ``deps`` each run takes (``run(deps=...)``), reaching
            tools, validators and ``instructions`` through a :class:`~subagent.RunContext`:
            it types the agent (``SubAgent[Output, Deps]``), and a run given no deps, or
            deps that are not an instance of it (when it is a plain class), is refused.
            ``None`` (default): deps are optional and of any type.
        usage_limits: The default :class:`~subagent.UsageLimits` of the agent's runs
            (``run(usage_limits=...)`` replaces it for one run).
        approval: A policy deciding which calls need approval: ``(tool_name, arguments)
            -> bool``, called for each call of a ``normal`` turn's reply (tools with
            ``requires_approval=True`` need it whatever the policy says). When a reply
            calls one, the run pauses before running any call of that turn and returns a
            paused Step: see :meth:`resume`.
    """

    name: str
    prompt: str = ""
    output: type[OutputT] | OutputParser | None = None
    tools: Sequence[Tool | Callable[..., Any] | ToolSource] = ()
    llm: LLM | str | None = None
    max_turns: int = 5
    return_retries: int = 0
    context_policy: ContextPolicy = "collapse"
    validators: Sequence[Callable[[Any], Any] | Callable[[RunContext[DepsT], Any], Any]] = ()
    parser_kwargs: Mapping[str, Any] | None = None
    prompts: Mapping[str, str] = field(default_factory=dict)
    settings: Mapping[str, Any] = field(default_factory=dict)
    retry_policy: RetryPolicy = field(default_factory=RetryPolicy)
    timeout: float | None = None
    mission_timeout: float | None = None
    keep_tool_schemas: bool = False
    description: str = ""
    protocol: ProtocolName = "native"
    parallel_tool_calls: bool = True
    prune_unknown_args: bool = True
    max_tool_result_chars: int = TOOL_RESULT_LIMIT
    max_tool_calls_per_turn: int = TOOL_CALLS_PER_TURN
    correct_cut_replies: bool = True
    max_reply_chars: int | None = DEFAULT_MAX_REPLY_CHARS
    instructions: (
        str
        | Callable[[Mapping[str, Any]], str]
        | Callable[[RunContext[DepsT], Mapping[str, Any]], str]
        | None
    ) = None
    deps_type: type[DepsT] | None = None
    usage_limits: UsageLimits | None = None
    approval: Callable[[str, Mapping[str, Any]], bool] | None = None
    _parts: AgentParts = field(init=False, repr=False)
    _task: Template = field(init=False, repr=False)
    # The settings every run without overrides sends (one dict, read by adapters only).
    _settings: dict[str, Any] = field(init=False, repr=False)
    # Whether a run with tools it can never use (max_turns=1) was warned about already.
    _warned_unused_tools: bool = field(init=False, repr=False, default=False)
    # The fixed tools and the tool sources (MCP servers); None without sources.
    _sources: _SourcedParts | None = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ConfigurationError("name", f"must be a non-empty string, got {self.name!r}")
        if not isinstance(self.prompt, str):
            raise ConfigurationError("prompt", f"must be a Mustache string, got {self.prompt!r}")
        check_int("max_turns", self.max_turns, 1)
        check_int("return_retries", self.return_retries, 0)
        _check_policy(self.context_policy)
        object.__setattr__(self, "llm", _check_llm(self.llm))
        check_seconds("timeout", self.timeout)
        check_seconds("mission_timeout", self.mission_timeout)
        if not isinstance(self.retry_policy, RetryPolicy):
            raise ConfigurationError(
                "retry_policy", f"must be a RetryPolicy, got {self.retry_policy!r}"
            )
        if not isinstance(self.settings, Mapping):
            raise ConfigurationError("settings", f"must be a mapping, got {self.settings!r}")
        _check_limits("usage_limits", self.usage_limits)
        if self.deps_type is not None and not _is_type_form(self.deps_type):
            raise ConfigurationError(
                "deps_type", f"must be a type (the class of the run's deps), got {self.deps_type!r}"
            )
        for validator in self.validators:
            if not callable(validator):
                raise ConfigurationError("validators", f"{validator!r} is not callable")
        try:
            templates = default_templates().with_overrides(self.prompts)
        except TemplateError as exc:
            raise ConfigurationError("prompts", str(exc)) from exc
        try:
            task = Template("prompt", self.prompt)
            task.check_partials(())
        except TemplateError as exc:
            raise ConfigurationError("prompt", str(exc)) from exc
        plain, sources = split_sources(self.tools)
        tools = build_tools(plain)
        _check_output(self.output)
        contract = build_contract(
            self.output, self.parser_kwargs, max_reply_chars=self.max_reply_chars
        )
        protocol = _check_protocol(self.protocol)
        flags = ("keep_tool_schemas", "parallel_tool_calls", "prune_unknown_args",
                 "correct_cut_replies")  # fmt: skip
        for flag in flags:
            if not isinstance(getattr(self, flag), bool):
                raise ConfigurationError(flag, f"must be a bool, got {getattr(self, flag)!r}")
        check_int("max_tool_result_chars", self.max_tool_result_chars, 1)
        check_int("max_tool_calls_per_turn", self.max_tool_calls_per_turn, 1)
        toolbox = Toolbox(tools, templates, prune_unknown_args=self.prune_unknown_args,
                          result_limit=self.max_tool_result_chars,
                          call_limit=self.max_tool_calls_per_turn)  # fmt: skip

        instructions = self.instructions
        if not (instructions is None or isinstance(instructions, str) or callable(instructions)):
            raise ConfigurationError(
                "instructions",
                f"must be a string or a function of the run's context returning one, "
                f"got {instructions!r}",
            )
        static = instructions.strip() if isinstance(instructions, str) else ""

        def system(with_tools: bool, toolbox: Toolbox = toolbox) -> Message:
            listed = toolbox.definitions if with_tools else []
            text = protocol.system_prompt(templates, self.name, listed, contract)
            if static:
                text = f"{text}\n\n{static}"
            return Message(role="system", content=text)

        if self.approval is not None and not callable(self.approval):
            raise ConfigurationError(
                "approval", f"must be a function (tool_name, arguments) -> bool, got "
                f"{self.approval!r}"
            )  # fmt: skip
        parts = AgentParts(
            name=self.name,
            templates=templates,
            contract=contract,
            toolbox=toolbox,
            protocol=protocol,
            parallel_tool_calls=self.parallel_tool_calls,
            correct_cut_replies=self.correct_cut_replies,
            validators=tuple(self.validators),
            system_with_tools=system(True),
            system_without_tools=system(False),
            validators_take_context=any(takes_run_context(v) for v in self.validators),
            approval=_approval_check(tools, self.approval),
            fingerprint=_Once(self._fingerprint),
        )
        object.__setattr__(self, "_parts", parts)
        if sources:
            sourced = _SourcedParts(AgentTools(tools, sources), parts, system)
            object.__setattr__(self, "_sources", sourced)
            sourced.check_now()
        object.__setattr__(self, "_task", task)
        object.__setattr__(self, "_settings", dict(self.settings))

    async def run(
        self,
        context: Mapping[str, Any] | BaseModel | None = None,
        *,
        llm: LLM | str | None = None,
        max_turns: int | None = None,
        return_retries: int | None = None,
        messages: Sequence[Message | Mapping[str, Any]] | str | None = None,
        context_policy: ContextPolicy | None = None,
        settings: Mapping[str, Any] | None = None,
        retry_policy: RetryPolicy | None = None,
        timeout: float | None = None,
        mission_timeout: float | None = None,
        tracer_provider: TracerProvider | None = None,
        on_event: EventHandler | None = None,
        on_text: Callable[[str], object] | None = None,
        deps: DepsT | None = None,
        usage_limits: UsageLimits | None = None,
        on_state: Callable[[RunState], object] | None = None,
    ) -> Step[OutputT]:
        """Run the agent once and return its :class:`~subagent.Step`.

        A model's misbehaviour never raises: it ends in a failed step that keeps every turn.
        Keyword arguments override the definition's defaults for this run only.

        Args:
            context: Values for the prompt template (a mapping or a pydantic model).
            llm: The model, or a spec string such as ``"openai:gpt-4o-mini"`` (default: the
                agent's, else the calling agent's when nested).
            max_turns: The work budget for this run.
            return_retries: The correction budget for this run.
            messages: Use these messages as the task instead of rendering ``prompt``. Leading
                system messages extend the agent's system prompt for this run.
            context_policy: ``collapse``, ``accumulate`` or ``quote``.
            settings: Model settings, merged over the agent's.
            retry_policy: Transport retries for this run.
            timeout: Seconds allowed for one LLM call.
            mission_timeout: Seconds allowed for the whole run.
            tracer_provider: Where spans go (default: the global provider, if configured).
            on_event: Called with each :class:`~subagent.RunEvent`.
            on_text: Stream replies: called with each piece of text as it arrives, when
                the model can stream (``stream()``); otherwise with nothing.
            deps: The run's dependencies (a database handle, the caller's user id...),
                handed to tools, validators and ``instructions`` that take a
                :class:`~subagent.RunContext`; never recorded, traced or shown.
            usage_limits: What the run may spend (tokens, tool calls, cost), in place of
                the agent's ``usage_limits``; crossing one ends it ``failed(usage_limit)``.
            on_state: Called with the run's :class:`~subagent.RunState` after each turn
                that leaves it going on or paused (to save it, and :meth:`resume` from it);
                not called, and nothing taken, when not given.

        Raises:
            ConfigurationError: An option is invalid (nothing was sent to the model).
            MissingVariableError: The prompt needs a variable the context lacks.
            ParserContractError: The output parser or a validator is broken.

        Warns:
            UserWarning: The agent has tools but the run has ``max_turns=1``: its only turn
                is ``must_return``, where tools are never offered (once per agent).
        """
        options = self._options(
            llm=llm, max_turns=max_turns, return_retries=return_retries,
            context_policy=context_policy, settings=settings, retry_policy=retry_policy,
            timeout=timeout, mission_timeout=mission_timeout, tracer_provider=tracer_provider,
            on_event=on_event, on_text=on_text, on_state=on_state, deps=deps,
            usage_limits=usage_limits,
        )  # fmt: skip
        self._warn_if_tools_unused(options.max_turns, stacklevel=2)
        opening, parts = self._opening(context, messages, options)
        run = execute_run(parts, options, opening)
        del opening, parts, options  # the run keeps what it needs; this frame waits on it
        return cast("Step[OutputT]", await run)

    async def resume(
        self,
        state: RunState | str | bytes,
        decisions: Mapping[str, Decision | bool] | None = None,
        *,
        llm: LLM | str | None = None,
        settings: Mapping[str, Any] | None = None,
        retry_policy: RetryPolicy | None = None,
        timeout: float | None = None,
        mission_timeout: float | None = None,
        tracer_provider: TracerProvider | None = None,
        on_event: EventHandler | None = None,
        on_text: Callable[[str], object] | None = None,
        on_state: Callable[[RunState], object] | None = None,
        deps: DepsT | None = None,
        usage_limits: UsageLimits | None = None,
    ) -> Step[OutputT]:
        """Go on with a run from a saved :class:`~subagent.RunState`; return its Step.

        Resuming the state saved after turn k gives the Step the run would have given had
        it never stopped (the same turns, budgets and outcome; only wall-clock times differ).
        A paused state (``step.state`` of a paused Step) needs a decision for each call
        waiting for approval: ``Decision.approve()`` (or ``True``), ``Decision.deny(reason)``
        (or ``False``), ``Decision.edit(arguments)``, keyed by the call's id. The run may
        pause again.

        The budgets, context policy, conversation and system prompts come from the state;
        the options below are this part's own, as for :meth:`run`. ``mission_timeout``
        counts the time the run has already run.

        Args:
            state: The saved state, or its JSON.
            decisions: For a paused state: the decision about each waiting call, by id.
            llm: The model (default: the agent's).
            settings: Model settings, merged over the agent's.
            retry_policy: Transport retries.
            timeout: Seconds allowed for one LLM call.
            mission_timeout: Seconds allowed for the whole run, the time already run
                included.
            tracer_provider: Where spans go: the resumed part's run span is a child of the
                first part's, in the same trace.
            on_event: As for :meth:`run`.
            on_text: As for :meth:`run`.
            on_state: As for :meth:`run`.
            deps: As for :meth:`run` (a state never holds the deps: pass them again).
            usage_limits: As for :meth:`run`, for the resumed part only (what the run spent
                before the state was saved is not counted against them).

        Raises:
            StateMismatchError: The state was saved by another agent, or by one with other
                output, tools, prompts or protocol (the error names which).
            ConfigurationError: A decision is missing, names no waiting call, or the state
                is not paused but decisions were given.
            pydantic.ValidationError: ``state`` is JSON that is not a RunState (an unknown
                ``version`` included).
        """
        saved = state if isinstance(state, RunState) else RunState.model_validate_json(state)
        self._check_state(saved)
        given = _checked_decisions(saved, decisions)
        options = self._options(
            llm=llm, max_turns=saved.max_turns, return_retries=saved.return_retries,
            context_policy=saved.context_policy, settings=settings,
            retry_policy=retry_policy, timeout=timeout, mission_timeout=mission_timeout,
            tracer_provider=tracer_provider, on_event=on_event, on_text=on_text,
            on_state=on_state, deps=deps, usage_limits=usage_limits,
        )  # fmt: skip
        if options.mission_timeout is not None:
            options.mission_timeout = max(0.0, options.mission_timeout - saved.elapsed_s)
        parts = self._parts
        if (saved.system_with_tools, saved.system_without_tools) != (
            parts.system_with_tools, parts.system_without_tools,
        ):  # fmt: skip
            # The run's own system prompts (instructions of its context, caller's text).
            parts = dataclasses.replace(
                parts, system_with_tools=saved.system_with_tools,
                system_without_tools=saved.system_without_tools,
            )  # fmt: skip
        run = execute_run(parts, options, [], state=saved, decisions=given)
        return cast("Step[OutputT]", await run)

    def resume_sync(
        self,
        state: RunState | str | bytes,
        decisions: Mapping[str, Decision | bool] | None = None,
        *,
        backend: str = "asyncio",
        **options: Any,
    ) -> Step[OutputT]:
        """:meth:`resume` from synchronous code (starts and stops an event loop)."""
        return anyio.run(
            functools.partial(self.resume, state, decisions, **options), backend=backend
        )

    def _check_state(self, state: RunState) -> None:
        """Refuse a state this agent did not save (or could not have saved).

        Raises:
            StateMismatchError: Naming the part that differs.
        """
        if state.agent != self.name:
            raise StateMismatchError(
                "agent", f"the state is of agent {state.agent!r}, not {self.name!r}"
            )
        mine = self._parts.fingerprint()
        for part in sorted(set(mine) | set(state.fingerprint)):
            if mine.get(part) != state.fingerprint.get(part):
                raise StateMismatchError(
                    part,
                    f"agent {self.name!r} has another {part} than the agent that saved the "
                    f"state ({_PART_HINTS.get(part, part)}); resume it with the same "
                    f"definition",
                )

    def _fingerprint(self) -> dict[str, str]:
        """Digests of what a resuming agent must share with the saving one (computed once)."""
        parts = self._parts
        output: object
        if self.output is None or self.output is str:
            output = "text"
        elif _is_type_form(self.output):
            output = parts.contract.instructions(parts.templates)
        else:
            output = _qualified(self.output)
        tools = [
            [tool.name, tool.description, definition.parameters, tool.requires_approval]
            for tool, definition in zip(
                parts.toolbox.tools.values(), parts.toolbox.definitions, strict=True
            )
        ]
        instructions = self.instructions
        return {
            "output": digest([output, [_qualified(v) for v in self.validators],
                              dict(self.parser_kwargs or {})]),
            "tools": digest([tools, None if self.approval is None else _qualified(self.approval)]),
            "prompts": digest([self.prompt, dict(self.prompts), instructions
                               if instructions is None or isinstance(instructions, str)
                               else _qualified(instructions)]),
            "protocol": digest(self.protocol),
        }  # fmt: skip

    def start(
        self,
        context: Mapping[str, Any] | BaseModel | None = None,
        **options: Unpack[RunArguments],
    ) -> AgentRun[OutputT]:
        """A run to watch and stop: ``async with agent.start(...) as run:``.

        The run starts when the block is entered and lives as long as the block: call
        ``run.stop()`` to end it early (it ends ``failed(cancelled)`` with the turns taken so
        far), ``await run.result()`` for its Step. Leaving the block stops a run that has
        not finished. Options are checked here, before anything is sent.

        Args:
            context: Values for the prompt template.
            **options: The keyword arguments of :meth:`run`.

        Raises:
            ConfigurationError: An option is invalid.
            MissingVariableError: The prompt needs a variable the context lacks.
        """
        _check_option_names("SubAgent.start()", options)
        return self._handle(context, options, stream=False)

    def stream(
        self,
        context: Mapping[str, Any] | BaseModel | None = None,
        **options: Unpack[RunArguments],
    ) -> AgentRun[OutputT]:
        """A run whose events stream in: ``async with agent.stream(...) as events:``.

        Iterate the run for its typed events, in order: ``RunStarted``, per turn
        ``TurnStarted``, ``TextDelta`` / ``ReasoningDelta`` as the reply arrives (when the
        model can stream), ``ToolCallStarted`` / ``ToolCallEnded``, ``TurnEnded``; then
        ``RunEnded`` with the Step. Leaving the block early stops the run cleanly. The same
        handle as :meth:`start`: ``stop()`` and ``result()`` work too.

        Args:
            context: Values for the prompt template.
            **options: The keyword arguments of :meth:`run`.

        Raises:
            ConfigurationError: An option is invalid.
            MissingVariableError: The prompt needs a variable the context lacks.
        """
        _check_option_names("SubAgent.stream()", options)
        return self._handle(context, options, stream=True)

    def check_options(self, **options: Unpack[RunArguments]) -> None:
        """Check run options as :meth:`run` would, without running (for orchestrators).

        Raises:
            ConfigurationError: An option is invalid; the message names it.
        """
        _check_option_names("SubAgent.check_options()", options)
        given: dict[str, Any] = dict(options)
        messages = given.pop("messages", None)
        self._warn_if_tools_unused(self._options(**given).max_turns, stacklevel=2)
        if messages is not None:
            self._opening_as_given(None, messages, self._parts)

    def _handle(
        self,
        context: Mapping[str, Any] | BaseModel | None,
        arguments: RunArguments,
        *,
        stream: bool,
    ) -> AgentRun[OutputT]:
        given: dict[str, Any] = dict(arguments)
        messages = given.pop("messages", None)
        options = self._options(**given)
        # stacklevel 3: the line that called start() / stream()
        self._warn_if_tools_unused(options.max_turns, stacklevel=3)
        opening, parts = self._opening(context, messages, options)
        return AgentRun(parts, options, opening, stream=stream)

    def run_sync(
        self,
        context: Mapping[str, Any] | BaseModel | None = None,
        *,
        backend: str = "asyncio",
        **options: Any,
    ) -> Step[OutputT]:
        """Run the agent from synchronous code (starts and stops an event loop).

        Args:
            context: Values for the prompt template.
            backend: The anyio backend (``asyncio`` or ``trio``).
            **options: The keyword arguments of :meth:`run`.

        Raises:
            RuntimeError: Called while an event loop is running in this thread.
            TypeError: An option is not one of :meth:`run`'s (the message names the
                nearest).
        """
        _check_option_names("SubAgent.run_sync()", options)
        if type(options.get("max_turns")) is int or options.get("max_turns") is None:
            self._warn_if_tools_unused(options.get("max_turns"), stacklevel=2)
        try:
            library = sniffio.current_async_library()
        except sniffio.AsyncLibraryNotFoundError:
            pass
        else:
            raise RuntimeError(
                f"SubAgent.run_sync() cannot be called from a running {library} event loop; "
                f"use `await agent.run(...)` instead"
            )
        return anyio.run(functools.partial(self.run, context, **options), backend=backend)

    def as_tool(
        self,
        *,
        name: str | None = None,
        description: str | None = None,
        parameters: type[BaseModel] | Mapping[str, Any] | None = None,
        max_depth: int = 3,
        deps: Any = _PASS_DOWN,
        requires_approval: bool = False,
    ) -> Tool:
        """This agent as a tool of another agent.

        The tool runs this agent on its own model, or on the calling run's model when it
        has none, and returns its output. The child's :class:`~subagent.Step` is kept on
        the parent's :class:`~subagent.ToolResult` (``step``), and its tokens count as the
        parent's ``nested`` usage. A failed child run is a tool error the parent's model
        sees (its Step kept all the same); so is a child run that raised (a parser bug, a
        script that ran out): its Step is then ``failed(error)`` with the turns it made, so
        their tokens still count. Its run traces under the tool's span.

        Args:
            name: The tool's name (default: the agent's).
            description: What the parent's model is told (default: the agent's
                ``description``).
            parameters: The tool's typed input: a pydantic model (the child runs with an
                instance of it as its context), or a mapping of the prompt's variables to
                their types. Default: the prompt's top-level variables, as strings.
            max_depth: How deep agents may nest below the top-level run. A call that would
                start this agent deeper is refused with a tool error the parent sees.
            deps: The deps this agent's runs take. Default: the calling run's deps, passed
                down as they are.
            requires_approval: Calls of this tool need approval in the parent's run (see
                :class:`Tool`).

        Raises:
            ConfigurationError: ``parameters`` leaves out a variable the prompt needs,
                ``max_depth`` is not an int >= 1, or the tool's name (the agent's, when
                ``name`` is not given) is not a valid tool name: the message suggests one.
                Also when this agent asks for approval of its own tool calls: a child run
                cannot pause inside its parent's tool call (see ``docs/durable.md``).
        """
        check_int("max_depth", max_depth, 1)
        if self._parts.approval is not None:
            raise ConfigurationError(
                "approval",
                f"agent {self.name!r} asks for approval of tool calls, so it cannot be "
                f"another agent's tool: its run would pause inside the parent's tool call, "
                f"which a saved state cannot resume; give the approval to the parent "
                f"instead (as_tool(requires_approval=True), or the parent's approval policy)",
            )
        named = self.name if name is None else name
        if not isinstance(named, str) or not _TOOL_NAME.match(named):
            whose = f"agent {self.name!r}" if name is None else f"{name!r}"
            suggestion = _tool_name_from(named if isinstance(named, str) else self.name)
            raise ConfigurationError(
                "name",
                f"{whose} is not a valid tool name (letters, digits, _ and -, starting with "
                f"a letter or _, at most 64 characters): give the tool one with "
                f"as_tool(name={suggestion!r})",
            )
        signature, model = _tool_signature(self._task.variables(), parameters)
        agent = self

        async def call(run: RunContext[Any], /, **arguments: Any) -> ToolOutput:
            depth = current_depth() + 1
            if depth > max_depth:
                raise NestedRunError(
                    f"agent {agent.name!r} was not run: it would be nested {depth} deep, "
                    f"past max_depth={max_depth}; answer without it"
                )
            context: Mapping[str, Any] | BaseModel = (
                model(**arguments) if model is not None else arguments
            )
            started = time.perf_counter()
            try:
                step = await agent.run(context, deps=run.deps if deps is _PASS_DOWN else deps)
            except Exception as exc:  # a bug below; its turns (and tokens) stay counted
                message = f"agent {agent.name!r} raised {type(exc).__name__}: {exc}"
                failed = build_step(
                    agent=agent.name, output=None,
                    failure=Failure(reason=FailReason.ERROR, message=message),
                    turns=list(getattr(exc, "turns", ())), max_turns=agent.max_turns,
                    return_retries=agent.return_retries,
                    duration_s=time.perf_counter() - started,
                )  # fmt: skip
                raise NestedRunError(message, failed) from exc
            if step.failure is not None:
                failure = step.failure
                raise NestedRunError(
                    f"agent {agent.name!r} failed ({failure.reason.value}): {failure.message}",
                    step,
                )
            return ToolOutput(step.output, step=step)

        # The run's context first (passed by the calling run, never in the schema; named so
        # that no prompt variable clashes with it), then the tool's arguments.
        context_parameter = inspect.Parameter(
            "_subagent_run", inspect.Parameter.POSITIONAL_ONLY, annotation=RunContext
        )
        call.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[context_parameter, *signature.parameters.values()]
        )
        call.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()}
        call.__annotations__["_subagent_run"] = RunContext
        return Tool(
            call,
            name=name or self.name,
            description=description or self.description or f"Delegate to the {self.name} agent.",
            requires_approval=requires_approval,
        )

    # --- per run ---

    def _options(
        self,
        *,
        llm: LLM | str | None = None,
        max_turns: int | None = None,
        return_retries: int | None = None,
        context_policy: ContextPolicy | None = None,
        settings: Mapping[str, Any] | None = None,
        retry_policy: RetryPolicy | None = None,
        timeout: float | None = None,
        mission_timeout: float | None = None,
        tracer_provider: TracerProvider | None = None,
        on_event: EventHandler | None = None,
        on_text: Callable[[str], object] | None = None,
        deps: Any = None,
        usage_limits: UsageLimits | None = None,
        on_state: Callable[[RunState], object] | None = None,
    ) -> RunOptions:
        parent_llm, parent_provider = current_run_model()
        # The agent's own model was checked when it was built (a spec string is an LLMSpec).
        model = _check_llm(llm) or cast(LLM | None, self.llm) or parent_llm
        if model is None:
            raise ConfigurationError(
                "llm", f"agent {self.name!r} has no model: pass llm= to SubAgent or to run()"
            )
        if settings is not None and not isinstance(settings, Mapping):
            raise ConfigurationError("settings", f"must be a mapping, got {settings!r}")
        if retry_policy is not None and not isinstance(retry_policy, RetryPolicy):
            raise ConfigurationError("retry_policy", f"must be a RetryPolicy, got {retry_policy!r}")
        check_callback("on_event", on_event)
        check_callback("on_text", on_text)
        if deps is not None or self.deps_type is not None:
            self._check_deps(deps)
        if usage_limits is not None:
            _check_limits("usage_limits", usage_limits)
        check_callback("on_state", on_state)
        return RunOptions(
            llm=model,
            max_turns=self.max_turns if max_turns is None else check_int("max_turns", max_turns, 1),
            return_retries=(
                self.return_retries
                if return_retries is None
                else check_int("return_retries", return_retries, 0)
            ),
            context_policy=(
                self.context_policy if context_policy is None else _check_policy(context_policy)
            ),
            retry_policy=retry_policy or self.retry_policy,
            timeout=self.timeout if timeout is None else check_seconds("timeout", timeout),
            mission_timeout=(
                self.mission_timeout
                if mission_timeout is None
                else check_seconds("mission_timeout", mission_timeout)
            ),
            settings={**self.settings, **settings} if settings else self._settings,
            keep_tool_schemas=self.keep_tool_schemas,
            tracer_provider=tracer_provider or parent_provider,
            on_event=on_event,
            on_text=on_text,
            deps=deps,
            usage_limits=self.usage_limits if usage_limits is None else usage_limits,
            on_state=on_state,
        )

    def _check_deps(self, deps: object) -> None:
        """Refuse a run without the deps the agent declared, or with deps of another type.

        Raises:
            ConfigurationError: Naming the agent, the type and what was given.
        """
        expected = self.deps_type
        if expected is None:
            return
        if deps is None:
            raise ConfigurationError(
                "deps",
                f"agent {self.name!r} declares deps_type={_type_name(expected)}: pass "
                f"deps= to the run",
            )
        if isinstance(expected, type):
            try:
                fits = isinstance(deps, expected)
            except TypeError:  # a Protocol that is not runtime-checkable: not checked
                fits = True
            if not fits:
                raise ConfigurationError(
                    "deps",
                    f"agent {self.name!r} declares deps_type={_type_name(expected)}, got "
                    f"{_article(type(deps).__name__)} instance",
                )

    def _warn_if_tools_unused(self, max_turns: object, stacklevel: int) -> None:
        """Warn, once per agent, of a run whose tools can never be offered (max_turns=1)."""
        if max_turns is None:
            max_turns = self.max_turns
        has_tools = bool(self._parts.toolbox) or self._sources is not None
        if max_turns == 1 and has_tools and not self._warned_unused_tools:
            object.__setattr__(self, "_warned_unused_tools", True)
            warnings.warn(
                f"agent {self.name!r} has tools but runs with max_turns=1: its only turn is "
                f"must_return, where tools are never offered; give it max_turns >= 2 to let "
                f"the model use them (warned once per agent)",
                UserWarning,
                stacklevel=stacklevel + 1,
            )

    def _opening(
        self,
        context: Mapping[str, Any] | BaseModel | None,
        messages: Sequence[Message | Mapping[str, Any]] | str | None,
        options: RunOptions | None = None,
    ) -> tuple[list[Message], AgentParts]:
        parts = self._parts if self._sources is None else self._sources.parts()
        if callable(self.instructions):
            # The system prompt of this run: the runtime's, then the agent's instructions
            # (then, below, any system text the caller's messages bring).
            extra = self._run_instructions(context, options)
            if extra:
                parts = dataclasses.replace(
                    parts,
                    system_with_tools=_extend(parts.system_with_tools, extra),
                    system_without_tools=_extend(parts.system_without_tools, extra),
                )
        return self._opening_as_given(context, messages, parts)

    def _run_instructions(
        self, context: Mapping[str, Any] | BaseModel | None, options: RunOptions | None
    ) -> str:
        """The text of ``instructions=`` for one run, from its context (and its deps)."""
        function = cast(Callable[..., object], self.instructions)
        if takes_run_context(function):
            max_turns = self.max_turns if options is None else options.max_turns
            phase = "normal" if max_turns > 1 else "must_return"
            deps = None if options is None else options.deps
            run = RunContext(deps=deps, agent=self.name, turn=0, phase=phase,
                             depth=current_depth() + 1)  # fmt: skip
            text = function(run, _values(context))
        else:
            text = function(_values(context))
        if not isinstance(text, str):
            raise ConfigurationError(
                "instructions",
                f"the function must return a string, got {text!r} ({type(text).__name__})",
            )
        return text.strip()

    def _opening_as_given(
        self,
        context: Mapping[str, Any] | BaseModel | None,
        messages: Sequence[Message | Mapping[str, Any]] | str | None,
        parts: AgentParts,
    ) -> tuple[list[Message], AgentParts]:
        if messages is not None:
            try:
                opening = messages_from(messages)
            except Exception as exc:
                raise ConfigurationError("messages", f"invalid messages: {exc}") from exc
            if not opening:
                raise ConfigurationError("messages", "must not be empty")
            if opening[0].role == "system":
                # The caller's system text extends the agent's system prompt: one system
                # message per request, in every phase.
                extra = "\n\n".join(m.content for m in opening if m.role == "system")
                opening = [m for m in opening if m.role != "system"]
                if not opening:
                    raise ConfigurationError("messages", "needs a message besides the system one")
                parts = dataclasses.replace(
                    parts,
                    system_with_tools=_extend(parts.system_with_tools, extra),
                    system_without_tools=_extend(parts.system_without_tools, extra),
                )
                return opening, parts
            return opening, parts
        values = _values(context)
        if not self.prompt.strip():
            raise ConfigurationError(
                "prompt", f"agent {self.name!r} has an empty prompt and no messages were given"
            )
        return [user_message(self._task.render(values).strip())], parts


def _check_limits(name: str, value: object) -> None:
    if value is not None and not isinstance(value, UsageLimits):
        raise ConfigurationError(name, f"must be a UsageLimits or None, got {value!r}")


def _type_name(kind: object) -> str:
    return getattr(kind, "__name__", None) or repr(kind)


_PART_HINTS = {
    "output": "output type or parser, validators, parser_kwargs",
    "tools": "tool names, descriptions, schemas, which need approval, the approval policy",
    "prompts": "the task prompt, template overrides, instructions",
    "protocol": "native or react",
}


def _qualified(value: object) -> str:
    """A function's or type's module and qualified name (its identity across processes)."""
    module = getattr(value, "__module__", "") or ""
    name = getattr(value, "__qualname__", None) or repr(value)
    return f"{module}.{name}"


def _approval_check(
    tools: Mapping[str, Tool], policy: Callable[[str, Mapping[str, Any]], bool] | None
) -> Callable[[ToolCall], bool] | None:
    """Whether a call needs approval: ``None`` when no call of the agent ever does."""
    needing = frozenset(name for name, tool in tools.items() if tool.requires_approval)
    if not needing and policy is None:
        return None

    def needs_approval(call: ToolCall) -> bool:
        if call.name in needing:
            return True
        if policy is None or call.name not in tools:  # an unknown tool never runs
            return False
        arguments = call.arguments if isinstance(call.arguments, dict) else {}
        return bool(policy(call.name, arguments))

    return needs_approval


def _checked_decisions(
    state: RunState, decisions: Mapping[str, Decision | bool] | None
) -> dict[str, Decision]:
    """The decisions for a paused state's waiting calls, each one checked.

    Raises:
        ConfigurationError: One is missing, names no waiting call, is not a decision, or
            decisions were given for a state that is not paused.
    """
    given = dict(decisions or {})
    pending = state.pending
    if pending is None:
        if given:
            raise ConfigurationError(
                "decisions", f"the state is not paused (phase {state.phase!r}): it takes none"
            )
        return {}
    waiting = {call.id: call for call in pending.waiting}
    unknown = sorted(set(given) - set(waiting))
    if unknown:
        raise ConfigurationError(
            "decisions", f"no call waiting for approval has the id(s) {unknown}; the waiting "
            f"calls: {sorted(waiting)}"
        )  # fmt: skip
    checked: dict[str, Decision] = {}
    for call_id, call in waiting.items():
        if call_id not in given:
            raise ConfigurationError(
                "decisions", f"call {call_id!r} ({call.name}) needs a decision: "
                f"Decision.approve(), Decision.deny(reason) or Decision.edit(arguments)"
            )  # fmt: skip
        decision = given[call_id]
        if decision is True:
            decision = Decision.approve()
        elif decision is False:
            decision = Decision.deny()
        if not isinstance(decision, Decision):
            raise ConfigurationError(
                "decisions", f"the decision for call {call_id!r} must be a Decision or a "
                f"bool, got {decision!r}"
            )  # fmt: skip
        checked[call_id] = decision
    return checked


class _SourcedParts:
    """The parts of an agent with tool sources: rebuilt when a source's tool list moves.

    Each run reads the sources' cached lists when it starts (nothing is awaited); the
    parts built from one set of lists are kept until a source's revision moves.
    """

    __slots__ = ("_built", "_system", "_template", "tools")

    def __init__(
        self, tools: AgentTools, template: AgentParts, system: Callable[[bool, Toolbox], Message]
    ):
        self.tools = tools
        self._template = template
        self._system = system
        self._built: tuple[tuple[int, ...], AgentParts] | None = None

    def check_now(self) -> None:
        """Refuse a name clash at once when every source is ready (connected) already."""
        with contextlib.suppress(SourceNotReadyError):
            self.parts()

    def parts(self) -> AgentParts:
        """The parts of a run starting now.

        Raises:
            ConfigurationError: A source is not ready, or two tools share a name.
        """
        revisions, tools = self.tools.current()
        built = self._built
        if built is not None and built[0] == revisions:
            return built[1]
        template = self._template
        old = template.toolbox
        toolbox = Toolbox(tools, template.templates, prune_unknown_args=old.prune_default,
                          result_limit=old.result_limit, call_limit=old.call_limit)  # fmt: skip
        parts = dataclasses.replace(
            template,
            toolbox=toolbox,
            system_with_tools=self._system(True, toolbox),
            system_without_tools=self._system(False, toolbox),
        )
        self._built = (revisions, parts)
        return parts


def _values(context: Mapping[str, Any] | BaseModel | None) -> Mapping[str, Any]:
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


def _tool_signature(
    variables: set[str], parameters: type[BaseModel] | Mapping[str, Any] | None
) -> tuple[inspect.Signature, type[BaseModel] | None]:
    """The signature of an agent's tool, and the model its arguments build (if any)."""
    keyword = inspect.Parameter.KEYWORD_ONLY
    if parameters is None:
        return inspect.Signature(
            [inspect.Parameter(v, keyword, annotation=str) for v in sorted(variables)]
        ), None
    if isinstance(parameters, type) and issubclass(parameters, BaseModel):
        fields = parameters.model_fields
        declared = [
            inspect.Parameter(
                field_name, keyword,
                annotation=Annotated[info.annotation, info],
                default=inspect.Parameter.empty if info.is_required() else info.get_default(),
            )
            for field_name, info in fields.items()
        ]  # fmt: skip
        names, model = set(fields), parameters
    elif isinstance(parameters, Mapping):
        declared = [inspect.Parameter(str(v), keyword, annotation=t) for v, t in parameters.items()]
        names, model = {str(v) for v in parameters}, None
    else:
        raise ConfigurationError(
            "parameters",
            f"must be a pydantic model or a mapping of variable names to types, got {parameters!r}",
        )
    missing = sorted(variables - names)
    if missing:
        raise ConfigurationError(
            "parameters", f"leaves out {missing}, which the agent's prompt needs"
        )
    return inspect.Signature(declared), model
