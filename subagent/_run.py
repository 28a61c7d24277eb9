"""The turn loop: one run of an agent, driven by the phase machine.

Each turn: build the request for the current phase (tools stripped outside ``normal``),
call the model (transport retries inside the turn), judge the reply (a tool turn, an
explicit fail, or a return attempt), fire the machine's trigger, and write the feedback the
next turn needs. The machine decides the next phase and why a run failed; this module only
awaits, judges and records. Whoever listens (spans, ``on_event``, ``on_text``) is told
through the run's :class:`~subagent.observe.Observer`, scope by scope.
"""

from __future__ import annotations

import contextvars
import inspect
import math
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
from opentelemetry.trace import TracerProvider

from subagent._context import RunContext
from subagent._conversation import ContextPolicy, Conversation, with_notice
from subagent._errors import (
    ErrorKind,
    LLMContractError,
    LLMError,
    SubAgentError,
    blame_callback,
    callback_error,
)
from subagent._limits import Ledger, RunLimits, UsageLimits, ledgers_in_scope, run_limits
from subagent._phases import Budget, Phase, Trigger, advance
from subagent._records import (
    Failure,
    Step,
    ToolResult,
    Turn,
    TurnOutcome,
    TurnType,
    build_step,
    trusted,
    user_message,
)
from subagent._state import STATE_VERSION, Decision, PendingCalls, RunState
from subagent._templates import TemplateSet
from subagent._text import fence, scrub_surrogates
from subagent.llm import (
    LLM,
    LLMRequest,
    LLMResponse,
    Message,
    ReasoningSplitter,
    RetryPolicy,
    StopReason,
    StreamDelta,
    ToolCall,
    ToolDefinition,
    TransportRetry,
    TurnInfo,
    call_with_retries,
    split_reasoning,
)
from subagent.observe import (
    NO_OBSERVER,
    ChatScope,
    EventHandler,
    EventQueue,
    Observer,
    TurnScope,
    continuing_trace,
    current_traceparent,
    mark_resumed,
    observer_for_run,
    refuse_awaitable,
)
from subagent.parsers import OutputContract, ParseResult, detect_explicit_fail, run_validators
from subagent.protocols import ReplyProtocol
from subagent.tools import Toolbox, ToolRun, render_result

__all__ = ["AgentParts", "RunOptions", "current_depth", "current_run_model", "execute_run"]


@dataclass(frozen=True, slots=True)
class AgentParts:
    """What a run needs from its :class:`~subagent.SubAgent`, prepared once per agent."""

    name: str
    templates: TemplateSet
    contract: OutputContract
    toolbox: Toolbox
    protocol: ReplyProtocol
    parallel_tool_calls: bool
    correct_cut_replies: bool
    validators: Sequence[Any]
    system_with_tools: Message
    system_without_tools: Message
    # Whether a call needs approval before it runs (None: no tool of the agent does).
    approval: Callable[[ToolCall], bool] | None = None
    # What must match between the agent that saved a RunState and the one resuming it.
    fingerprint: Callable[[], dict[str, str]] = dict
    # Immutable records every run of the agent would otherwise build again (bounded).
    _turn_infos: dict[tuple[int, TurnType], TurnInfo] = field(default_factory=dict)
    _notices: dict[str, Message] = field(default_factory=dict)
    # Whether a validator takes a RunContext: the run builds one for validators only then.
    validators_take_context: bool = False

    def turn_info(self, index: int, turn_type: TurnType) -> TurnInfo:
        """The (shared, frozen) :class:`TurnInfo` of turn ``index`` of this agent."""
        info = self._turn_infos.get((index, turn_type))
        if info is None:
            info = TurnInfo(index=index, type=turn_type.value, agent=self.name)
            if len(self._turn_infos) < _CACHE_LIMIT:
                self._turn_infos[(index, turn_type)] = info
        return info

    def notice(self, text: str) -> Message:
        """A runtime's own user message (a must-return warning), shared when it repeats."""
        message = self._notices.get(text)
        if message is None:
            message = Message(role="user", content=text)
            if len(self._notices) < _CACHE_LIMIT and len(text) <= 1024:
                self._notices[text] = message
        return message


@dataclass(slots=True)
class RunOptions:
    """The resolved options of one run (built once per run, never changed)."""

    llm: LLM
    max_turns: int
    return_retries: int
    context_policy: ContextPolicy
    retry_policy: RetryPolicy
    timeout: float | None
    mission_timeout: float | None
    settings: dict[str, Any]
    keep_tool_schemas: bool
    tracer_provider: TracerProvider | None
    on_event: EventHandler | None
    on_text: Callable[[str], object] | None = None
    # The caller's deps: handed to tools and validators in a RunContext, never recorded.
    deps: Any = field(default=None, repr=False)
    usage_limits: UsageLimits | None = None
    # Called with the run's state after each turn that leaves it active or paused.
    on_state: Callable[[RunState], object] | None = None


@dataclass(slots=True)
class _Verdict:
    """What the runtime made of one reply (or of a failed call)."""

    outcome: TurnOutcome
    trigger: Trigger
    error: str | None = None
    error_type: str | None = None
    tool_results: list[ToolResult] = field(default_factory=list)
    output: Any = None
    error_kind: ErrorKind | None = None  # the LLM error behind a failed call
    tool_messages: list[Message] | None = None  # a tool turn's exchange, kept in context
    # An invalid final tool answer: the tool's name and the error, for the feedback after
    # the tool turn (worded once the next phase is known: may the model call again?).
    final_invalid: tuple[str, str] | None = None
    calls: list[ToolCall] | None = None  # the calls the reply asked for, with their ids
    summary: str | None = None  # the error without text of the reply (else from error_type)
    waiting: list[str] | None = None  # the ids of calls that need approval (a pause)


# The run in progress in this task: its model, tracer provider and nesting depth, so an
# agent used as a tool of another agent runs on its parent's model, traces into its
# parent's provider, and knows how deep it is.
_CURRENT: contextvars.ContextVar[tuple[LLM, TracerProvider | None, int] | None] = (
    contextvars.ContextVar("subagent_current_run", default=None)
)


def current_run_model() -> tuple[LLM | None, TracerProvider | None]:
    """The model and tracer provider of the run in progress in this task, if any."""
    current = _CURRENT.get()
    return (None, None) if current is None else (current[0], current[1])


def current_depth() -> int:
    """How deep the run in progress is nested (0: a top-level run; -1: no run)."""
    current = _CURRENT.get()
    return -1 if current is None else current[2]


def execute_run(
    parts: AgentParts,
    options: RunOptions,
    opening: list[Message],
    *,
    stop: anyio.CancelScope | None = None,
    events: EventQueue | None = None,
    state: RunState | None = None,
    decisions: Mapping[str, Decision] | None = None,
) -> Coroutine[Any, Any, Step[Any]]:
    """The run of the agent to ``done``, ``failed`` or ``paused``: await it for its Step.

    Args:
        parts: The agent's prepared parts.
        options: The run's options.
        opening: The task's messages (unused when ``state`` is given).
        stop: Cancelling this scope stops the run: it ends ``failed(cancelled)`` with the
            turns taken so far.
        events: Where the run's events go (``SubAgent.stream()``).
        state: Go on from this saved state instead of starting (checked by the caller).
        decisions: For a paused state: the decision about each call that needs one.
    """
    # A plain function returning the run's coroutine: one coroutine less per run in flight.
    return _Run(parts, options, opening, stop, events, state, decisions).execute()


class _Run:
    __slots__ = (
        "_budget",
        "_conversation",
        "_decisions",
        "_depth",
        "_elapsed",
        "_extras",
        "_failure",
        "_in_flight",
        "_limits",
        "_observer",
        "_options",
        "_output",
        "_parts",
        "_pending",
        "_reply_usage",
        "_resumed",
        "_retries",
        "_started",
        "_stop",
        "_traceparent",
        "_turns",
    )  # fmt: skip

    def __init__(
        self,
        parts: AgentParts,
        options: RunOptions,
        opening: list[Message],
        stop: anyio.CancelScope | None = None,
        events: EventQueue | None = None,
        state: RunState | None = None,
        decisions: Mapping[str, Decision] | None = None,
    ):
        self._parts = parts
        self._options = options
        self._stop = stop
        # What a saved state brings (see _state.py); a fresh run has none of it.
        self._resumed = state is not None
        self._pending: PendingCalls | None = None
        self._decisions = decisions
        self._elapsed = 0.0
        self._traceparent: str | None = None
        if state is None:
            self._budget = Budget.start(options.max_turns, options.return_retries)
            if self._budget.phase is Phase.MUST_RETURN:
                opening = with_notice(opening, parts.notice(self._must_return_warning()))
            self._conversation = Conversation(options.context_policy, opening)
            self._turns: list[Turn] = []
        else:
            self._budget = Budget(state.phase, state.work_remaining, state.retries_remaining,
                                  state.retry_total)  # fmt: skip
            self._conversation = Conversation.restore(
                state.context_policy, state.history, state.latest_failure, state.collapsed
            )
            self._turns = list(state.turns)
            self._pending = state.pending
            if self._pending is not None:  # the decisions are given: the turn goes on
                advance(self._budget, Trigger.RESUMED)
            self._elapsed = state.elapsed_s
            self._traceparent = state.traceparent
        self._output: Any = None
        self._failure: Failure | None = None
        self._observer: Observer = observer_for_run(
            parts.name, options.llm, options.tracer_provider, options.on_event, options.on_text,
            events, parts.toolbox.tools,
        )  # fmt: skip
        self._started = 0.0
        self._depth = current_depth() + 1  # how deep this run is nested (0: top level)
        self._retries = _RetrySink()
        # Objects a tool returned for the next tool turn's calls (ToolOutput.extras).
        self._extras: Mapping[str, Any] | None = None
        # The calls of the tool turn under way and what has come back, for the record of a
        # turn cut short.
        self._in_flight: tuple[list[ToolCall], list[ToolRun | None]] | None = None
        # The usage limits this run checks (its own and those of its callers and batch).
        self._limits: RunLimits | None = (
            None
            if options.usage_limits is None and not _LEDGERS.get()
            else run_limits(options.usage_limits, parts.name, options.llm)
        )
        self._reply_usage = _NO_USAGE  # the turn under way's reply, for a RunContext

    # --- the loop ---

    async def execute(self) -> Step[Any]:
        self._started = time.perf_counter()
        options = self._options
        # A resumed run continues its original trace: its span is a child of the first's.
        with (
            continuing_trace(self._traceparent if self._resumed else None),
            self._observer.run(
                options.max_turns, options.return_retries, self._budget.state
            ) as run,
        ):
            if self._resumed:
                mark_resumed()
            try:
                if options.mission_timeout is None and self._stop is None:
                    budget = self._budget
                    while budget.active:  # the common case, inline: no frame of its own
                        await self._take_turn()
                else:
                    await self._turns_until_done()
            except SubAgentError as exc:
                exc.turns = tuple(self._turns)
                raise
            except Exception as exc:
                error = self._callback_error(exc)
                if error is None or error is exc:
                    raise
                raise error from None  # alone, not inside a task group's ExceptionGroup
            paused = self._budget.state == Phase.PAUSED
            step = build_step(
                agent=self._parts.name,
                output=self._output,
                failure=self._failure,
                turns=self._turns,
                max_turns=options.max_turns,
                return_retries=options.return_retries,
                duration_s=self._elapsed + time.perf_counter() - self._started,
                state=self.snapshot() if paused else None,
            )
            try:
                run.finished(step)
            except Exception as exc:
                self._callback_error(exc)
                raise
        return step

    def _callback_error(self, exc: Exception) -> BaseException | None:
        """The user callback's own exception behind ``exc``, given the turns made so far.

        A callback raising during concurrent tool calls reaches here inside the task
        group's ``ExceptionGroup``; the callback's exception is returned to be raised alone.
        """
        error = callback_error(exc)
        if error is not None:
            error.turns = tuple(self._turns)  # type: ignore[attr-defined]
        return error

    async def _turns_until_done(self) -> None:
        """Take turns until the budget says stop, the mission timeout, or a stop."""
        mission, stop = self._options.mission_timeout, self._stop
        with stop if stop is not None else anyio.CancelScope() as stopping:
            with anyio.move_on_after(math.inf if mission is None else mission) as timer:
                while self._budget.active:
                    await self._take_turn()
        if timer.cancelled_caught:
            message = f"the run did not finish within mission_timeout={mission:g} s"
            self._abort(Trigger.TIMED_OUT, message, ErrorKind.TIMEOUT)
        elif stopping.cancelled_caught:
            self._abort(Trigger.STOPPED, "the run was stopped before it finished", None)

    def _abort(self, trigger: Trigger, message: str, error_kind: ErrorKind | None) -> None:
        """End a run cut short from outside its turns (a mission timeout, a stop)."""
        if self._budget.active:
            advance(self._budget, trigger)
            self._failure = self._failed(message, error_kind)
        last = self._turns[-1] if self._turns else None
        if last is not None and last.error_type == "cancelled":
            self._turns[-1] = last.model_copy(
                update={"error": message, "phase_after": Phase.FAILED.value}
            )

    # --- one turn ---

    async def _take_turn(self) -> None:
        if self._pending is not None:  # a paused turn, its decisions given
            await self._resume_turn(self._pending)
            return
        if self._limits is not None and self._limit_reached():
            return
        budget = self._budget
        phase = budget.phase
        turn_type = _TURN_TYPE[phase]
        index = len(self._turns) + 1
        parts = self._parts
        offer_tools = phase is Phase.NORMAL
        native = parts.protocol.native_tools
        tools = (
            parts.toolbox.definitions
            if native and (offer_tools or self._options.keep_tool_schemas)
            else _NO_TOOLS
        )
        system = parts.system_with_tools if offer_tools or tools else parts.system_without_tools
        messages = self._conversation.messages(system)
        collapsed = self._conversation.collapsed
        # Built from values of the right types already: no validation (and no copies).
        request = trusted(LLMRequest, _REQUEST_FIELDS, {
            "messages": messages, "tools": tools,
            "tool_choice": "none" if tools and phase is not Phase.NORMAL else None,
            "settings": self._options.settings, "turn": parts.turn_info(index, turn_type),
        })  # fmt: skip
        in_retry = phase is Phase.RETRY
        started = time.perf_counter()
        sink = self._retries
        sink.retries = _NO_RETRIES
        response: LLMResponse | None = None
        observer = self._observer
        options = self._options
        with observer.turn(
            index, turn_type, budget.work_remaining, budget.retries_remaining,
            budget.retry_attempt if in_retry else None, budget.retry_total if in_retry else None,
            len(tools), len(messages), collapsed,
        ) as observed:  # fmt: skip
            try:
                try:
                    with observer.chat(request) as chat:
                        deltas = _Deltas(chat) if observer.wants_text else None
                        reply = await call_with_retries(
                            options.llm, request, options.retry_policy, options.timeout,
                            sink if observer is NO_OBSERVER else _RetryRecorder(sink, chat),
                            deltas,
                        )  # fmt: skip
                        if type(reply) is not LLMResponse and not isinstance(reply, LLMResponse):
                            raise LLMContractError(_wrong_reply(options.llm, reply))
                        response = reply
                        if deltas is not None:
                            await deltas.flush()
                        chat.replied(response)
                    response = _reasoning_apart(response)
                except LLMError as exc:
                    verdict = self._llm_failure(exc)
                else:
                    over = None if self._limits is None else self._over_limit(response)
                    verdict = over or await self._judge(response, index)
            except anyio.get_cancelled_exc_class():
                self._record(observed, Turn(
                    index=index, type=turn_type, outcome=TurnOutcome.FAIL,
                    phase_after=phase.value, reply=response.text if response else "",
                    reasoning=response.reasoning if response else "",
                    tool_calls=self._interrupted_calls(response),
                    tool_results=self._interrupted_results(),
                    error="cancelled before the turn completed", error_type="cancelled",
                    error_summary="cancelled before the turn completed",
                    stop_reason=response.stop_reason if response else None,
                    usage=response.usage if response else _NO_USAGE,
                    messages_sent=len(messages), messages_collapsed=collapsed,
                    work_remaining=budget.left_after_turn()[0],
                    retries_remaining=budget.left_after_turn()[1],
                    transport_retries=sink.retries,
                    duration_s=time.perf_counter() - started,
                ))  # fmt: skip
                raise
            except SubAgentError as exc:  # a bug in user code: raised, its turn kept
                self._record(observed, self._broken_turn(
                    index, turn_type, phase, response, None, exc, len(messages), collapsed,
                    started,
                ))  # fmt: skip
                raise
            except BaseExceptionGroup as group:  # the same, from one of parallel tool calls
                bug = _bug_in(group)
                if bug is None:
                    raise
                self._record(observed, self._broken_turn(
                    index, turn_type, phase, response, None, bug, len(messages), collapsed,
                    started,
                ))  # fmt: skip
                raise bug from group
            try:
                feedback = self._apply(verdict, response)
            except SubAgentError as exc:  # a template of the agent's that cannot render
                self._record(observed, self._broken_turn(
                    index, turn_type, phase, response, verdict, exc, len(messages), collapsed,
                    started,
                ))  # fmt: skip
                raise
            error = verdict.error
            # Every value is of its type already; only text quoting the model or a tool may
            # hold a lone surrogate (the reply's text was scrubbed when it was received).
            self._record(observed, trusted(Turn, _TURN_FIELDS, {
                "index": index, "type": turn_type, "outcome": verdict.outcome,
                "phase_after": budget.state,
                "reply": response.text if response else "",
                "reasoning": response.reasoning if response else "",
                "tool_calls": verdict.calls if verdict.calls is not None else [],
                "tool_results": list(verdict.tool_results),
                "error": None if error is None else scrub_surrogates(error),
                "error_type": verdict.error_type,
                "error_summary": None if error is None else _summary(verdict),
                "feedback": None if feedback is None else scrub_surrogates(feedback),
                "stop_reason": response.stop_reason if response else None,
                "raw_stop_reason": response.raw_stop_reason if response else None,
                "usage": response.usage if response else _NO_USAGE,
                "messages_sent": len(messages), "messages_collapsed": collapsed,
                "work_remaining": budget.work_remaining,
                "retries_remaining": budget.retries_remaining,
                "transport_retries": sink.retries, "duration_s": time.perf_counter() - started,
                "decisions": {},
            }))  # fmt: skip
        if options.on_state is not None and budget.state not in _FINAL:
            self._tell_state(options.on_state)

    # --- a paused turn, resumed ---

    async def _resume_turn(self, pending: PendingCalls) -> None:
        """Finish the turn that paused: run its calls as decided, then move on.

        The turn goes on as any tool turn does (the table's ``used_tools`` rows); the pause
        itself spent nothing.
        """
        self._pending = None
        paused = self._turns.pop()  # the paused turn's record, completed here
        budget = self._budget
        parts = self._parts
        decisions = dict(self._decisions or {})
        index = paused.index
        offered = len(parts.toolbox.definitions) if parts.protocol.native_tools else 0
        started = time.perf_counter() - paused.duration_s
        response = pending.response
        with self._observer.turn(
            index, TurnType.NORMAL, budget.work_remaining, budget.retries_remaining, None, None,
            offered, paused.messages_sent, paused.messages_collapsed,
        ) as observed:  # fmt: skip
            calls, preset = self._decided(pending, decisions)
            try:
                verdict = await self._run_tools(response, calls, preset)
                verdict.calls = list(pending.calls)  # the record keeps the model's arguments
                feedback = self._apply(verdict, response)
            except anyio.get_cancelled_exc_class():
                self._record(observed, paused.model_copy(update={
                    "outcome": TurnOutcome.FAIL, "phase_after": Phase.NORMAL.value,
                    "tool_results": self._interrupted_results(),
                    "error": "cancelled before the turn completed", "error_type": "cancelled",
                    "error_summary": "cancelled before the turn completed",
                    "work_remaining": budget.left_after_turn()[0],
                    "duration_s": time.perf_counter() - started, "decisions": decisions,
                }))  # fmt: skip
                raise
            except SubAgentError as exc:
                self._record(observed, self._broken_turn(
                    index, TurnType.NORMAL, Phase.NORMAL, response, None, exc,
                    paused.messages_sent, paused.messages_collapsed, started,
                ))  # fmt: skip
                raise
            error = verdict.error
            self._record(observed, paused.model_copy(update={
                "outcome": verdict.outcome, "phase_after": budget.state,
                "tool_calls": verdict.calls, "tool_results": list(verdict.tool_results),
                "error": None if error is None else scrub_surrogates(error),
                "error_type": verdict.error_type,
                "error_summary": None if error is None else _summary(verdict),
                "feedback": None if feedback is None else scrub_surrogates(feedback),
                "work_remaining": budget.work_remaining,
                "retries_remaining": budget.retries_remaining,
                "duration_s": time.perf_counter() - started, "decisions": decisions,
            }))  # fmt: skip
        if self._options.on_state is not None and budget.state not in _FINAL:
            self._tell_state(self._options.on_state)

    def _tell_state(self, on_state: Callable[[RunState], object]) -> None:
        """Hand the state to ``on_state``; its exception ends the run, raised as it is."""
        try:
            returned = on_state(self.snapshot())
        except Exception as exc:
            blame_callback(exc, "on_state")
            raise
        if returned is not None and inspect.isawaitable(returned):
            refuse_awaitable("on_state", returned)

    def _decided(
        self, pending: PendingCalls, decisions: Mapping[str, Decision]
    ) -> tuple[list[ToolCall], dict[int, ToolResult]]:
        """The calls to run (edited ones with new arguments); denied ones' results by position."""
        calls: list[ToolCall] = []
        denied: dict[int, ToolResult] = {}
        templates = self._parts.templates
        for position, call in enumerate(pending.calls):
            decision = decisions.get(call.id)
            if decision is not None and decision.action == "edit":
                call = call.model_copy(update={"arguments": dict(decision.arguments or {})})
            elif decision is not None and decision.action == "deny":
                reason = scrub_surrogates(decision.reason)
                content = templates.render("tool_denied", name=call.name, reason=reason,
                                           fence=fence(reason))  # fmt: skip
                denied[position] = ToolResult(call_id=call.id, name=call.name, ok=False,
                                              content=content, error_type="denied")  # fmt: skip
            calls.append(call)
        return calls, denied

    def snapshot(self) -> RunState:
        """The run's state now, between two turns (or paused): see :class:`RunState`."""
        history, latest, collapsed = self._conversation.snapshot()
        budget = self._budget
        parts = self._parts
        options = self._options
        # Built from values of the right types already: no validation (measured in bench).
        return trusted(RunState, _STATE_FIELDS, {
            "version": STATE_VERSION, "agent": parts.name, "fingerprint": parts.fingerprint(),
            "phase": budget.state, "work_remaining": budget.work_remaining,
            "retries_remaining": budget.retries_remaining, "retry_total": budget.retry_total,
            "max_turns": options.max_turns, "return_retries": options.return_retries,
            "context_policy": options.context_policy,
            "system_with_tools": parts.system_with_tools,
            "system_without_tools": parts.system_without_tools,
            "history": history, "latest_failure": latest, "collapsed": collapsed,
            "turns": list(self._turns), "pending": self._pending,
            "traceparent": self._traceparent or current_traceparent(),
            "elapsed_s": self._elapsed + time.perf_counter() - self._started,
            "dropped_extras": sorted(self._extras) if self._extras else [],
        })  # fmt: skip

    def _record(self, observed: TurnScope, turn: Turn) -> None:
        self._turns.append(turn)
        observed.ended(turn)

    def _broken_turn(
        self,
        index: int,
        turn_type: TurnType,
        phase: Phase,
        response: LLMResponse | None,
        verdict: _Verdict | None,
        error: SubAgentError,
        messages_sent: int,
        collapsed: int,
        started: float,
    ) -> Turn:
        """The record of a turn a bug in user code ended (a parser, a template, a model).

        It keeps the reply (when one came) and the calls and results of a tool turn, so the
        error raised out of the run carries the turn that caused it.
        """
        kind = type(error).__name__
        if verdict is not None and verdict.calls is not None:
            calls, results = verdict.calls, list(verdict.tool_results)
        else:
            calls, results = self._interrupted_calls(response), self._interrupted_results()
        budget = self._budget
        return Turn(
            index=index, type=turn_type, outcome=TurnOutcome.FAIL, phase_after=phase.value,
            reply=response.text if response else "",
            reasoning=response.reasoning if response else "",
            tool_calls=calls, tool_results=results,
            error=scrub_surrogates(f"{kind}: {error}"), error_type=kind, error_summary=kind,
            stop_reason=response.stop_reason if response else None,
            raw_stop_reason=response.raw_stop_reason if response else None,
            usage=response.usage if response else _NO_USAGE,
            messages_sent=messages_sent, messages_collapsed=collapsed,
            work_remaining=budget.work_remaining, retries_remaining=budget.retries_remaining,
            transport_retries=self._retries.retries, duration_s=time.perf_counter() - started,
        )  # fmt: skip

    def _interrupted_calls(self, response: LLMResponse | None) -> list[ToolCall]:
        if self._in_flight is not None:
            return list(self._in_flight[0])
        return list(response.tool_calls) if response else []

    def _interrupted_results(self) -> list[ToolResult]:
        """The results of a tool turn cut short: those that came back, then the others."""
        if self._in_flight is None:
            return []
        calls, runs = self._in_flight
        self._in_flight = None
        return [
            run.result if run is not None else ToolResult(
                call_id=call.id, name=call.name, ok=False, content="", error_type="cancelled",
                completed=False,
            )
            for call, run in zip(calls, runs, strict=True)
        ]  # fmt: skip

    # --- judging a reply ---

    @staticmethod
    def _llm_failure(exc: LLMError) -> _Verdict:
        trigger = Trigger.TIMED_OUT if exc.kind is ErrorKind.TIMEOUT else Trigger.LLM_FAILED
        return _Verdict(TurnOutcome.FAIL, trigger, error=str(exc), error_type=exc.kind.value,
                        error_kind=exc.kind)  # fmt: skip

    async def _judge(self, response: LLMResponse, index: int) -> _Verdict:
        self._reply_usage = response.usage  # counted in the usage a RunContext shows
        if response.stop_reason is StopReason.CONTENT_FILTER:
            message = "the provider's content filter blocked the reply"
            return _Verdict(TurnOutcome.FAIL, Trigger.LLM_FAILED, error=message,
                            error_type="content_filter",
                            error_kind=ErrorKind.CONTENT_FILTER)  # fmt: skip
        in_normal = self._budget.phase is Phase.NORMAL
        parts = self._parts
        offered = parts.toolbox.tools if in_normal else _NONE_OFFERED
        reading = parts.protocol.read(response, offered, parts.templates)
        if reading.calls:
            calls = [
                call if call.id else call.model_copy(update={"id": f"call_{index}_{position}"})
                for position, call in enumerate(reading.calls, start=1)
            ]
            if in_normal:
                approval = parts.approval
                if approval is not None:
                    waiting = [call.id for call in calls if approval(call)]
                    if waiting:
                        return _Verdict(TurnOutcome.PAUSED, Trigger.NEEDS_APPROVAL,
                                        calls=calls, waiting=waiting)  # fmt: skip
                return await self._run_tools(response, calls)
            error, results = self._parts.toolbox.refuse(calls)
            return _Verdict(TurnOutcome.ERROR, Trigger.MISSED, error, "tools_unavailable",
                            tool_results=results, calls=calls)  # fmt: skip
        if response.stop_reason is StopReason.LENGTH and parts.correct_cut_replies:
            cut = self._parts.templates.render("truncated_reply")
            return _Verdict(TurnOutcome.ERROR, Trigger.MISSED, cut, "truncated")
        if reading.problem is not None:
            return _Verdict(TurnOutcome.ERROR, Trigger.MISSED, reading.problem, "invalid_action")
        return await self._judge_answer(reading.answer or "")

    async def _judge_answer(self, text: str) -> _Verdict:
        """A return attempt: an explicit fail, or an answer the output contract judges."""
        templates = self._parts.templates
        reason = detect_explicit_fail(text, max_chars=self._parts.contract.max_reply_chars)
        if reason is not None:
            return _Verdict(TurnOutcome.FAIL, Trigger.GAVE_UP, error=reason,
                            error_type="explicit_fail")  # fmt: skip
        parsed: ParseResult = self._parts.contract.parse(text, templates)
        if not parsed.ok:
            return _Verdict(TurnOutcome.ERROR, Trigger.MISSED, parsed.feedback, "invalid_output",
                            summary=parsed.summary or None)  # fmt: skip
        value = parsed.value
        if self._parts.validators:
            context = self._run_context() if self._parts.validators_take_context else None
            token, ledgers = self._nesting(), self._handing_down()
            try:
                validation = await run_validators(self._parts.validators, value, context)
            finally:
                if ledgers is not None:
                    _LEDGERS.reset(ledgers)
                _CURRENT.reset(token)
            if not validation.valid:
                error = templates.render("validation_failed", errors=list(validation.errors))
                count = len(validation.errors)
                return _Verdict(TurnOutcome.ERROR, Trigger.MISSED, error, "validation_failed",
                                summary=f"{count} validation error(s)")  # fmt: skip
        return _Verdict(TurnOutcome.SUCCESS, Trigger.RETURNED, output=value)

    async def _run_tools(
        self,
        response: LLMResponse,
        calls: list[ToolCall],
        preset: Mapping[int, ToolResult] | None = None,
    ) -> _Verdict:
        """Run a tool turn's calls (concurrently unless told not to); results keep call order.

        ``preset``: results of calls that are not run (denied), by position.
        """
        toolbox = self._parts.toolbox
        runs: list[ToolRun | None] = [None] * len(calls)
        # The calls past the per-reply limit are refused, never run.
        running = calls[: toolbox.call_limit]
        refused = toolbox.over_limit(calls)
        runs[len(running) :] = [ToolRun(result) for result in refused]
        to_run: Sequence[tuple[int, ToolCall]] = list(enumerate(running))
        if preset:
            for position, result in preset.items():
                if position < len(running):
                    runs[position] = ToolRun(result)
            to_run = [(position, call) for position, call in to_run if position not in preset]
        if self._limits is not None:  # denied and refused calls never run: they do not count
            over = self._limits.before_tools(len(to_run))
            if over is not None:
                return _Verdict(TurnOutcome.FAIL, Trigger.LIMIT_REACHED, over, "usage_limit",
                                calls=calls)  # fmt: skip
        self._in_flight = (calls, runs)
        extras, self._extras = self._extras, None  # handed to this turn's calls, then cleared
        context = self._run_context() if toolbox.wants_context else None
        token, ledgers = self._nesting(), self._handing_down()
        try:
            if len(to_run) == 1 or not self._parts.parallel_tool_calls:
                for position, call in to_run:
                    runs[position] = await self._run_tool(call, extras, context)
            else:

                async def run_one(position: int, call: ToolCall) -> None:
                    runs[position] = await self._run_tool(call, extras, context)

                async with anyio.create_task_group() as group:
                    for position, call in to_run:
                        group.start_soon(run_one, position, call)
        finally:
            if ledgers is not None:
                _LEDGERS.reset(ledgers)
            _CURRENT.reset(token)
        self._in_flight = None
        done = [run for run in runs if run is not None]
        results = [run.result for run in done]
        for run in done:
            if run.extras:
                self._extras = {**(self._extras or {}), **run.extras}
        lost = next((run for run in done if run.lost is not None), None)
        if lost is not None:  # the results stay on the turn; the run ends with them
            return _Verdict(TurnOutcome.FAIL, Trigger.SERVER_LOST, lost.lost, "tool_server_lost",
                            tool_results=results, calls=calls,
                            summary=lost.result.name)  # fmt: skip
        exchange = self._parts.protocol.tool_exchange(response, calls, results,
                                                      self._parts.templates)  # fmt: skip
        final = next((run for run in done if run.final), None)
        if final is not None:
            answer = await self._judge_final(final)
            if answer.outcome is TurnOutcome.SUCCESS:
                answer.tool_results, answer.calls = results, calls
                return answer
            return _Verdict(TurnOutcome.ERROR, Trigger.USED_TOOLS, answer.error,
                            answer.error_type, tool_results=results, tool_messages=exchange,
                            final_invalid=(final.result.name, answer.error or ""), calls=calls,
                            summary=answer.summary)  # fmt: skip
        failed = [result for result in results[: len(running)] if not result.ok]
        if failed or refused:
            lines = [f"{result.name}: {result.error_type}" for result in failed]
            if refused:
                lines.append(f"{len(refused)} call(s) past the limit of {len(running)} per "
                             f"reply: too_many_calls")  # fmt: skip
            error = "\n".join(lines)
            return _Verdict(TurnOutcome.ERROR, Trigger.USED_TOOLS, error, "tool_error",
                            tool_results=results, tool_messages=exchange, calls=calls)  # fmt: skip
        return _Verdict(TurnOutcome.CONTINUE, Trigger.USED_TOOLS, tool_results=results,
                        tool_messages=exchange, calls=calls)  # fmt: skip

    async def _judge_final(self, final: ToolRun) -> _Verdict:
        """A tool's final value, judged by the output contract like any return."""
        value = final.value
        return await self._judge_answer(value if isinstance(value, str) else render_result(value))

    async def _run_tool(
        self, call: ToolCall, extras: Mapping[str, Any] | None, context: RunContext[Any] | None
    ) -> ToolRun:
        with self._observer.tool(call) as observed:
            last = self._budget.last_work_turn_next  # tools run in normal turns only
            run = await self._parts.toolbox.run(call, extras, context, last_tool_turn=last)
            observed.returned(run.result)
        return run

    def _nesting(self) -> contextvars.Token[tuple[LLM, TracerProvider | None, int] | None]:
        """Make this run the one an agent started from its tools or validators nests in.

        Set only around the code that may start a run (a tool, a validator), not for the
        whole run: a run waiting on its model then holds no context of its own.
        """
        options = self._options
        return _CURRENT.set((options.llm, options.tracer_provider, self._depth))

    def _handing_down(self) -> contextvars.Token[tuple[Ledger, ...]] | None:
        """Hand this run's ledgers to the runs its tools or validators start (with limits)."""
        return None if self._limits is None else _LEDGERS.set(self._limits.ledgers)

    # --- the run's context and limits ---

    def _run_context(self) -> RunContext[Any]:
        """The :class:`RunContext` of the turn under way (for tools and validators)."""
        usage = self._reply_usage
        calls = 0
        for turn in self._turns:
            usage = usage + turn.usage
            for result in turn.tool_results:
                if result.error_type not in _NOT_RUN:
                    calls += 1
                if result.step is not None:
                    usage = usage + result.step.usage.total
        return RunContext(
            deps=self._options.deps, agent=self._parts.name, turn=len(self._turns) + 1,
            phase=self._budget.state, usage=usage, tool_calls=calls, depth=self._depth,
        )  # fmt: skip

    def _limit_reached(self) -> bool:
        """End the run before its next call when a usage limit is reached already."""
        assert self._limits is not None
        reached = self._limits.before_call()
        if reached is None:
            return False
        self._abort(Trigger.LIMIT_REACHED, reached, None)
        return True

    def _over_limit(self, response: LLMResponse) -> _Verdict | None:
        """Charge a reply to the limits; the verdict ending the run when it crossed one."""
        assert self._limits is not None
        exceeded = self._limits.after_reply(response.usage)
        if exceeded is None:
            return None
        return _Verdict(TurnOutcome.FAIL, Trigger.LIMIT_REACHED, exceeded, "usage_limit",
                        calls=list(response.tool_calls) or None)  # fmt: skip

    # --- moving on ---

    def _apply(self, verdict: _Verdict, response: LLMResponse | None) -> str | None:
        """Fire the verdict's trigger; write what the next turn needs. Returns the feedback."""
        budget = self._budget
        next_phase = advance(budget, verdict.trigger)
        if next_phase is Phase.PAUSED:
            assert response is not None and verdict.calls is not None and verdict.waiting
            self._pending = PendingCalls(response=response, calls=verdict.calls,
                                         needs_approval=verdict.waiting)  # fmt: skip
            return None
        if next_phase is Phase.DONE:
            self._output = verdict.output
            return None
        if next_phase is Phase.FAILED:
            self._failure = self._failed(self._failure_message(verdict), verdict.error_kind)
            return None
        if verdict.tool_messages is not None:
            exchange = verdict.tool_messages
            notes = []
            if verdict.final_invalid is not None:
                name, error = verdict.final_invalid
                notes.append(self._parts.templates.render(
                    "tool_final_invalid", name=name, error=error,
                    tools_left=next_phase is Phase.NORMAL,
                ))  # fmt: skip
            if next_phase is Phase.MUST_RETURN:
                notes.append(self._must_return_warning())
            notice = "\n\n".join(notes) or None
            if notice is not None:
                exchange = with_notice(exchange, self._parts.notice(notice))
            self._conversation.add_exchange(exchange)
            return notice
        assert verdict.error is not None and response is not None
        feedback = self._feedback(verdict.error, next_phase)
        reply = self._parts.protocol.failed_reply(response)
        self._conversation.add_failed_attempt(reply, self._user(feedback))
        return feedback

    def _failed(self, message: str, error_kind: ErrorKind | None) -> Failure:
        """The run's failure; its reason is the one the table's row recorded."""
        reason = self._budget.failure_reason
        assert reason is not None
        return Failure(reason=reason, message=message, error_kind=error_kind)

    def _failure_message(self, verdict: _Verdict) -> str:
        if verdict.trigger is Trigger.MISSED:
            options = self._options
            return (
                f"no valid answer within max_turns={options.max_turns} and "
                f"return_retries={options.return_retries}; last error: {verdict.error}"
            )
        return verdict.error or verdict.outcome.value

    def _feedback(self, error: str, next_phase: Phase) -> str:
        templates = self._parts.templates
        budget = self._budget
        if next_phase is Phase.RETRY:
            attempt = budget.retry_attempt
            return templates.render(
                "retry_feedback", error_message=error, current_retry=attempt,
                total_retries=budget.retry_total, repeated=attempt > 1,
            )  # fmt: skip
        final = next_phase is Phase.MUST_RETURN
        text = templates.render("error_feedback", error_message=error, final_turn=final,
                                turns_left=budget.work_remaining,
                                has_tools=bool(self._parts.toolbox))  # fmt: skip
        if final:
            text = f"{text}\n\n{self._must_return_warning()}"
        return text

    def _must_return_warning(self) -> str:
        retries = self._budget.retries_remaining
        return self._parts.templates.render(
            "must_return_warning",
            has_tools=bool(self._parts.toolbox),
            has_retries=retries > 0,
            retry_count=retries,
        )

    @staticmethod
    def _user(text: str) -> Message:
        return user_message(text)


_TURN_TYPE = {Phase(kind.value): kind for kind in TurnType}
# Every field of a request the loop builds is set: one set for all of them (frozen models
# never change it).
_REQUEST_FIELDS = set(LLMRequest.model_fields)
_TURN_FIELDS = set(Turn.model_fields)
_STATE_FIELDS = set(RunState.model_fields)
_FINAL = (Phase.DONE.value, Phase.FAILED.value)
_CACHE_LIMIT = 256
_NONE_OFFERED: frozenset[str] = frozenset()
_NO_TOOLS: list[ToolDefinition] = []  # shared by requests offering none; never changed
_NO_USAGE = LLMResponse.model_fields["usage"].get_default(call_default_factory=True)
_LEDGERS = ledgers_in_scope()
# Tool results of calls that were refused, never run (they count as no tool call).
_NOT_RUN = frozenset({"tools_unavailable", "too_many_calls"})


_NO_RETRIES: list[TransportRetry] = []  # shared while a turn has none; never appended to


class _RetrySink:
    """Keeps the transport retries of a run's current turn (one object per run)."""

    __slots__ = ("retries",)

    def __init__(self) -> None:
        self.retries = _NO_RETRIES

    def __call__(self, retry: TransportRetry) -> None:
        if self.retries is _NO_RETRIES:
            self.retries = []
        self.retries.append(retry)


class _RetryRecorder:
    """Keeps a turn's transport retries and reports each to the chat scope."""

    __slots__ = ("_chat", "_sink")

    def __init__(self, sink: _RetrySink, chat: ChatScope):
        self._sink = sink
        self._chat = chat

    def __call__(self, retry: TransportRetry) -> None:
        self._sink(retry)
        self._chat.retried(retry)


class _Deltas:
    """Hands a streamed reply's pieces to the chat scope, reasoning and text apart.

    Reasoning comes apart from the text (``reasoning_content``) or inside it (``<think>``
    blocks). Text is passed on as it arrives until a ``<`` shows up; from there a
    :class:`ReasoningSplitter` takes the stream apart (holding back what could begin a tag).
    Call :meth:`flush` once the reply is complete.
    """

    __slots__ = ("_chat", "_sent_text", "_splitter")

    def __init__(self, chat: ChatScope):
        self._chat = chat
        self._splitter: ReasoningSplitter | None = None
        self._sent_text = False

    def __call__(self, delta: StreamDelta) -> Awaitable[None] | None:
        waiting: list[Awaitable[None]] = []
        if delta.reasoning:
            self._send(True, delta.reasoning, waiting)
        text = delta.text
        if text:
            if self._splitter is None and "<" in text:
                self._splitter = ReasoningSplitter(answer_started=self._sent_text)
            if self._splitter is None:
                self._send(False, text, waiting)
            else:
                for is_reasoning, piece in self._splitter.feed(text):
                    self._send(is_reasoning, piece, waiting)
        return _in_turn(waiting)

    async def flush(self) -> None:
        if self._splitter is None:
            return
        waiting: list[Awaitable[None]] = []
        for is_reasoning, piece in self._splitter.flush():
            self._send(is_reasoning, piece, waiting)
        for item in waiting:
            await item

    def _send(self, is_reasoning: bool, piece: str, waiting: list[Awaitable[None]]) -> None:
        if is_reasoning:
            sent = self._chat.reasoning(piece)
        else:
            self._sent_text = self._sent_text or bool(piece.strip())
            sent = self._chat.text(piece)
        if sent is not None:
            waiting.append(sent)


def _summary(verdict: _Verdict) -> str:
    """What was wrong with a turn, without text from the model or a tool (for traces)."""
    if verdict.summary:
        return f"{verdict.error_type}: {verdict.summary}"
    kind = verdict.error_type or verdict.outcome.value
    if kind == "tool_error":
        failed = [r for r in verdict.tool_results if not r.ok]
        over = sum(r.error_type == "too_many_calls" for r in failed)
        parts = [
            f"{'(unknown tool)' if r.error_type == 'unknown_tool' else r.name} {r.error_type}"
            for r in failed
            if r.error_type != "too_many_calls"
        ]
        if over:
            parts.append(f"{over} call(s) too_many_calls")
        return "tool_error: " + ", ".join(parts)
    if kind == "tools_unavailable":
        return f"tools_unavailable: {len(verdict.tool_results)} call(s) refused"
    return kind


def _wrong_reply(llm: LLM, value: object) -> str:
    """What a model that broke the :class:`~subagent.llm.LLM` protocol returned."""
    shown = repr(value)
    shown = shown if len(shown) <= 80 else f"{shown[:79]}…"
    return (
        f"{type(llm).__name__}.complete() must return an LLMResponse, got "
        f"{type(value).__name__}: {shown}"
    )


def _bug_in(group: BaseExceptionGroup[Any]) -> SubAgentError | None:
    """The error of a bug in user code that ended a task group, when that is all it holds."""
    errors = group.exceptions
    if errors and all(isinstance(error, SubAgentError) for error in errors):
        first = errors[0]
        assert isinstance(first, SubAgentError)
        return first
    return None


def _in_turn(waiting: list[Awaitable[None]]) -> Awaitable[None] | None:
    if not waiting:
        return None
    if len(waiting) == 1:
        return waiting[0]
    return _each(waiting)


async def _each(waiting: list[Awaitable[None]]) -> None:
    for item in waiting:
        await item


def _reasoning_apart(response: LLMResponse) -> LLMResponse:
    """The reply with ``<think>`` blocks moved from its text to its reasoning."""
    reasoning, answer = split_reasoning(response.text)
    if not reasoning:
        return response
    joined = f"{response.reasoning}\n\n{reasoning}" if response.reasoning else reasoning
    return response.model_copy(update={"text": answer, "reasoning": joined})
