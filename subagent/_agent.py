"""``SubAgent``: an immutable agent definition, and its entry points (``run``, ``resume``...).

The definition is checked and its parts are built once (``_build``); each entry point
resolves the run's options once (``_options``) and hands them to the turn loop
(``_run``); ``as_tool`` lives in ``_as_tool``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import anyio
import sniffio
from pydantic import BaseModel
from typing_extensions import TypeVar, Unpack

from subagent._as_tool import PASS_DOWN, agent_tool
from subagent._build import build, check_llm, run_parts
from subagent._claims import StateClaims
from subagent._definition import AgentDefinition
from subagent._errors import ConfigurationError
from subagent._handle import AgentRun
from subagent._options import (
    ResumeArguments,
    RunArguments,
    check_option_names,
    messages_as_given,
    opening,
    refuse_untaken,
    rendered_task,
    resolve,
)
from subagent._override import NOT_GIVEN, Override, active_override, overriding
from subagent._policies import moved_keywords
from subagent._resume import checked_resume
from subagent._run import execute_run
from subagent.llm import LLM
from subagent.records import Decision, RunState, Step
from subagent.tools import Tool, ToolSource

__all__ = ["RunArguments", "SubAgent"]

# A text agent (no output=) is SubAgent[str]; with a model or type output, SubAgent[Model];
# with a parser, what the parser says it returns (Any for a plain ParseResult).
OutputT = TypeVar("OutputT", default=str)
# The run's deps, second so that SubAgent[Model] keeps meaning what it meant; Any (not
# declared) unless the agent names its deps_type.
DepsT = TypeVar("DepsT", default=Any)
Context = Mapping[str, Any] | BaseModel | None


@dataclass(frozen=True, eq=False)
class SubAgent(AgentDefinition[OutputT, DepsT]):
    """An agent definition: what to do, what to return, with which tools and budgets.

    Immutable and safe to share across concurrent runs; every run gets its own books.

    Args:
        name: The agent's name (in prompts, traces and records).
        prompt: The task, a Mustache template rendered with the run's context.
        output: What a valid answer is: a pydantic model or type (JSON is extracted from the
            reply and validated), ``None``/``str`` (the reply's text), or a parser
            ``(text, **kwargs) -> ParseResult`` (its keyword arguments given as
            ``functools.partial(parser, **kwargs)``).
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
        validators: Checks run on the parsed output: ``(output) -> Validation`` or
            ``{"valid": bool, "errors": [...]}``, sync or async; ``(ctx, output)`` when the
            first parameter is annotated :class:`~subagent.RunContext`.
        prompts: Template overrides by name (``system``, ``retry_feedback``...).
        settings: Model settings passed to the LLM (``temperature``, ``max_tokens``...).
        retry_policy: Transport retries of a failed LLM call.
        description: What the agent does, when it is used as a tool of another agent.
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
        correction: How correction turns differ from the failed attempt: their own output
            mode (the provider's structured output, a forced answer tool), sampling and
            model (:class:`~subagent.Correction`). ``None`` (default): the records' choice
            for the output: an object output (a pydantic model) has
            its final work turn and its corrections under the server's structured output,
            another typed output its corrections, where the server has structured output
            (else they go as text); a text or parser output sends every turn alike.
            ``Correction()`` sends every turn as the work turns are.
            ``run(correction=...)`` replaces it for one run.
        hooks: :class:`~subagent.RunHook` objects every run of the agent calls at fixed
            points of its turns (docs/hooks.md), after approval and usage limits and
            before ``run(hooks=...)``'s own.
        tool_policy: How the tools travel, run and are judged (:class:`ToolPolicy`: the
            protocol, parallel calls, argument pruning, result and call limits, the
            approval policy).
        reply_policy: How replies are read, kept and answered (:class:`ReplyPolicy`: the
            context policy, cut and overlong replies, the explicit fail).
        timeouts: The default seconds of one LLM call and of the whole run
            (:class:`Timeouts`; ``run(timeout=..., mission_timeout=...)`` replace them).

    The keywords these records replaced (``protocol=``, ``approval=``, ``allow_fail=``,
    ``timeout=``... and ``parser_kwargs=``) still work for one release, with a
    :class:`DeprecationWarning` that says where each one goes.
    """

    def __post_init__(self) -> None:
        object.__setattr__(self, "llm", check_llm(self.llm))
        built = build(self)
        object.__setattr__(self, "_parts", built.parts)
        object.__setattr__(self, "_task", built.task)
        object.__setattr__(self, "_sources", built.sources)
        object.__setattr__(self, "_settings", built.settings)

    async def run(
        self, context: Context = None, **options: Unpack[RunArguments[DepsT]]
    ) -> Step[OutputT]:
        """Run the agent once and return its :class:`~subagent.Step`.

        A model's misbehaviour never raises: it ends in a failed step that keeps every turn.
        Keyword arguments override the definition's defaults for this run only.

        Args:
            context: Values for the prompt template (a mapping or a pydantic model).
            **options: The run's options (:class:`~subagent.RunArguments`): ``llm``,
                ``max_turns``, ``return_retries``, ``messages``, ``context_policy``,
                ``settings``, ``retry_policy``, ``timeout``, ``mission_timeout``,
                ``tracer_provider``, ``on_event``, ``on_text``, ``on_state``, ``deps``,
                ``usage_limits``.

        Raises:
            TypeError: An option is not one of the run's (the message names the nearest).
            ConfigurationError: An option is invalid (nothing was sent to the model).
            MissingVariableError: The prompt needs a variable the context lacks.
            ParserContractError: The output parser or a validator is broken.

        Warns:
            UserWarning: The agent has tools but the run has ``max_turns=1``: its only turn is
                ``must_return``, where tools are never offered (once per agent).
        """
        check_option_names("SubAgent.run()", options)
        made_by = self._runs_as()
        if made_by is not self:  # inside override(tools=..., instructions=...)
            return await made_by.run(context, **options)
        parts = run_parts(self)
        resolved = resolve(self, options, parts)
        self._warn_if_tools_unused(resolved.max_turns, stacklevel=2)
        task, parts, systems = opening(self, context, options.get("messages"), resolved, parts)
        run = execute_run(parts, resolved, task, systems)
        del task, parts, systems, resolved  # the run keeps what it needs; this frame waits
        return cast("Step[OutputT]", await run)

    async def resume(
        self,
        state: RunState | str | bytes,
        decisions: Mapping[str, Decision | bool] | None = None,
        *,
        key: bytes | None = None,
        claims: StateClaims | None = None,
        **options: Unpack[ResumeArguments[DepsT]],
    ) -> Step[OutputT]:
        """Go on with a run from a saved :class:`~subagent.RunState`; return its Step.

        Resuming the state saved after turn k gives the Step the run would have given had
        it never stopped (the same turns, budgets and outcome; only wall-clock times differ).
        A paused state (``step.state`` of a paused Step) needs a decision for each call
        that needs approval by the agent's own rules (never by what the state says):
        ``step.pending.approve(call_id)``, ``.deny(call_id, reason)`` or
        ``.edit(call_id, arguments)`` (decisions bound to the call as the approver saw it),
        or ``Decision.approve()`` / ``True``, ``Decision.deny(reason)`` / ``False``,
        ``Decision.edit(arguments)`` (unbound), keyed by the call's id. The run may pause
        again.

        A state is untrusted input: it is checked before anything runs (its fields must fit
        together; a bound decision must answer the call it was made for; an edit must fit
        the tool). The budgets, context policy, conversation and system prompts come from
        the state; the options are this part's own, as for :meth:`run`
        (:class:`ResumeArguments`). ``mission_timeout`` counts the time the run has already
        run; ``usage_limits`` count the resumed part only; ``deps`` must be passed again.

        Args:
            state: The saved state, or its JSON (its signed JSON when ``key`` is given).
            decisions: For a paused state: the decision about each waiting call, by id.
            key: The key the application signed the state with (:meth:`RunState.signed`):
                the state must be signed JSON, and its signature match.
            claims: Resume each state once only: its id is claimed here first
                (:class:`MemoryClaims` in one process, or a shared store), and a state
                claimed already is refused.
            **options: This part's options (:class:`~subagent.ResumeArguments`).

        Raises:
            InvalidStateError: The state is not one to resume: its fields do not fit
                together, its signature does not match, it was resumed already, or a bound
                decision's call changed (the error names the field).
            StateMismatchError: The state was saved by another agent, or by one with other
                output, tools, prompts or protocol (the error names which).
            ConfigurationError: A decision is missing, names a call that needs none, or is
                an edit the tool does not take; or the state is not paused but decisions
                were given.
        """
        check_option_names("SubAgent.resume()", options)
        refuse_untaken("resume", "SubAgent.resume()", options)
        parts = run_parts(self)
        saved, given = checked_resume(self, parts, state, decisions, key, claims)
        resolved = resolve(self, {**options, "max_turns": saved.max_turns,
                                  "return_retries": saved.return_retries,
                                  "context_policy": saved.context_policy}, parts)  # fmt: skip
        if resolved.mission_timeout is not None:
            resolved.mission_timeout = max(0.0, resolved.mission_timeout - saved.elapsed_s)
        run = execute_run(parts, resolved, [], state=saved, decisions=given)
        return cast("Step[OutputT]", await run)

    def resume_sync(
        self,
        state: RunState | str | bytes,
        decisions: Mapping[str, Decision | bool] | None = None,
        *,
        backend: str = "asyncio",
        key: bytes | None = None,
        claims: StateClaims | None = None,
        **options: Unpack[ResumeArguments[DepsT]],
    ) -> Step[OutputT]:
        """:meth:`resume` from synchronous code (starts and stops an event loop)."""
        resume = functools.partial(self.resume, state, decisions, key=key, claims=claims)
        return anyio.run(functools.partial(resume, **options), backend=backend)

    def start(
        self, context: Context = None, **options: Unpack[RunArguments[DepsT]]
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
        check_option_names("SubAgent.start()", options)
        return self._handle(context, options, stream=False)

    def stream(
        self, context: Context = None, **options: Unpack[RunArguments[DepsT]]
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
        check_option_names("SubAgent.stream()", options)
        return self._handle(context, options, stream=True)

    def check_options(
        self, context: Context = None, **options: Unpack[RunArguments[DepsT]]
    ) -> None:
        """Check run options as :meth:`run` would, without running (for orchestrators).

        Given a ``context`` (or ``messages``), the task is made as the run would make it:
        a variable the prompt needs and the context lacks is reported too.

        Raises:
            ConfigurationError: An option is invalid; the message names it.
            MissingVariableError: The prompt needs a variable ``context`` lacks.
        """
        check_option_names("SubAgent.check_options()", options)
        resolved = resolve(self, options)
        self._warn_if_tools_unused(resolved.max_turns, stacklevel=2)
        messages = options.get("messages")
        if messages is not None:
            messages_as_given(messages, self._parts.systems)
        elif context is not None:
            rendered_task(self, context)
        if resolved.message_history:
            opening(self, context, messages or "-", resolved)

    def _handle(
        self, context: Context, options: Mapping[str, Any], *, stream: bool
    ) -> AgentRun[OutputT]:
        made_by = self._runs_as()
        if made_by is not self:  # inside override(tools=..., instructions=...)
            return made_by._handle(context, options, stream=stream)
        parts = run_parts(self)
        resolved = resolve(self, options, parts)
        # stacklevel 3: the line that called start() / stream()
        self._warn_if_tools_unused(resolved.max_turns, stacklevel=3)
        task, parts, systems = opening(self, context, options.get("messages"), resolved, parts)
        return AgentRun(parts, resolved, task, systems, stream=stream)

    def run_sync(
        self,
        context: Context = None,
        *,
        backend: str = "asyncio",
        **options: Unpack[RunArguments[DepsT]],
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
        check_option_names("SubAgent.run_sync()", options)
        max_turns = options.get("max_turns")
        if type(max_turns) is int or max_turns is None:
            self._warn_if_tools_unused(max_turns, stacklevel=2)
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

    def override(
        self,
        *,
        llm: LLM | str | None = None,
        deps: Any = NOT_GIVEN,
        tools: Sequence[Tool | Callable[..., Any] | ToolSource] | None = None,
        instructions: Any = NOT_GIVEN,
    ) -> contextlib.AbstractContextManager[None]:
        """Run this agent with another model, deps, tools or instructions inside a ``with``.

        For tests of code that runs its own agents: every run of this agent started in the
        block (in the tasks it starts, and as a tool of another agent's run) gets what is
        given here, instead of the agent's own or what ``run()`` is given (``llm=``,
        ``deps=``). Runs outside the block, concurrent tests included, are not affected.
        What is not given stays as the agent has it.

        Args:
            llm: The model: a test model (``TestLLM``, ``ScriptedLLM``...), any LLM, or a
                spec string.
            deps: The deps its runs get (``None`` is a value: no deps).
            tools: Its tools instead of its own (fakes of the real ones).
            instructions: Its ``instructions`` instead of its own (``None``: none).

        Raises:
            ConfigurationError: Nothing to override, ``llm`` is not a model, or the tools or
                instructions are invalid (the agent they make is checked here).
        """
        model = None if llm is None else check_llm(llm)
        runs_as = None
        if tools is not None or instructions is not NOT_GIVEN:
            changes: dict[str, Any] = {}
            if tools is not None:
                changes["tools"] = tools
            if instructions is not NOT_GIVEN:
                changes["instructions"] = instructions
            runs_as = dataclasses.replace(self, **changes)
        if model is None and deps is NOT_GIVEN and runs_as is None:
            raise ConfigurationError(
                "override", "give what to replace: llm=, deps=, tools= or instructions="
            )
        return overriding(Override(self, model, deps, runs_as))

    def _runs_as(self) -> SubAgent[OutputT, DepsT]:
        """The agent a run of this one is made by now (another inside an override)."""
        override = active_override(self)
        if override is None or override.runs_as is None or override.runs_as is self:
            return self
        return cast("SubAgent[OutputT, DepsT]", override.runs_as)

    def as_tool(
        self,
        *,
        name: str | None = None,
        description: str | None = None,
        parameters: type[BaseModel] | Mapping[str, Any] | None = None,
        max_depth: int = 3,
        deps: Any = PASS_DOWN,
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
        return agent_tool(self, self.run, name=name, description=description, parameters=parameters,
                          max_depth=max_depth, deps=deps,
                          requires_approval=requires_approval)  # fmt: skip

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


def _taking_moved_keywords(init: Callable[..., None]) -> Callable[..., None]:
    """``init`` (the dataclass's), taking the keywords the policy records replaced."""

    @functools.wraps(init)
    def __init__(self: SubAgent[Any, Any], *args: Any, **kwargs: Any) -> None:
        init(self, *args, **moved_keywords(kwargs))

    return __init__


# The old keywords (protocol=, allow_fail=, timeout=...) keep working for one release: the
# dataclass's own __init__ (its signature, for type checkers and help()) behind a shim
# that moves them into their records with a DeprecationWarning. dataclasses.replace()
# goes through it too.
setattr(SubAgent, "__init__", _taking_moved_keywords(SubAgent.__init__))  # noqa: B010
