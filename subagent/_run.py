"""The turn loop: one run of an agent, driven by the phase machine.

A run is a :class:`~subagent._live.LiveRun` the loop advances turn by turn. A turn goes
through stages: prepare the request for the phase (tools stripped outside ``normal``),
call the model (``_call``: transport retries inside the turn), judge the reply
(``_judge``), run the tool calls it asks for (``_tool_stage``), then apply the verdict: its
trigger moves the state table and the next turn gets what it needs (``_feedback``). One
builder records the turn, however it ended (``_turns``). A paused turn, resumed, goes
through the same tool stage. Extensions (approval, usage limits, ``on_state``, input
guardrails) are hooks called at fixed places (``_hooks``); whoever listens is told through
the run's :class:`~subagent.observe.Observer`, scope by scope.
"""

from __future__ import annotations

import math
import time
from collections.abc import Coroutine, Mapping
from dataclasses import replace
from typing import Any

import anyio

from subagent._apply import apply, failure
from subagent._call import call_model
from subagent._context import RunContext
from subagent._conversation import with_notice
from subagent._correction import may_give_up
from subagent._errors import ErrorKind, LLMError, SubAgentError, callback_error, user_code_error
from subagent._feedback import must_return_warning
from subagent._hooks import ToolBatch
from subagent._judge import judge_reply
from subagent._live import LiveRun
from subagent._nesting import current_depth, enter_run, leave_run
from subagent._parts import AgentParts, RunOptions, Systems
from subagent._phases import Budget, Phase, Trigger, advance
from subagent._prepare import prepared, reentered
from subagent._tool_stage import run_batch
from subagent._turns import TurnDraft, ended_by, interrupted
from subagent._verdicts import Ended, GaveUp, Missed, Verdict
from subagent.llm import LLMRequest, LLMResponse, Message, ToolCall
from subagent.observe import observer_for_run
from subagent.observe._context import current_traceparent
from subagent.observe._observer import TurnScope
from subagent.observe._stream import EventQueue
from subagent.records import Decision, RunState, Step, ToolResult, Turn
from subagent.records._runs import build_step
from subagent.tools._execute import ToolRun

__all__ = ["execute_run"]


def execute_run(
    parts: AgentParts,
    options: RunOptions,
    opening: list[Message],
    systems: Systems | None = None,
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
        systems: The run's system messages (default: the agent's).
        stop: Cancelling this scope stops the run: it ends ``failed(cancelled)`` with the
            turns taken so far.
        events: Where the run's events go (``SubAgent.stream()``).
        state: Go on from this saved state instead of starting (checked by the caller).
        decisions: For a paused state: the decision about each call that needs one.
    """
    # A plain function returning the run's coroutine: one coroutine less per run in flight.
    run = _Run(parts, options, opening, systems or parts.systems, stop, events, state, decisions)
    return run.execute()


class _Run:
    __slots__ = ("_reply_usage", "_started", "_stop", "_task", "decisions", "depth", "hooks",
                 "in_flight", "live", "observer", "options", "parts")  # fmt: skip

    def __init__(
        self,
        parts: AgentParts,
        options: RunOptions,
        opening: list[Message],
        systems: Systems,
        stop: anyio.CancelScope | None,
        events: EventQueue | None,
        state: RunState | None,
        decisions: Mapping[str, Decision] | None,
    ):
        self.parts = parts
        self.options = options
        self.hooks = options.hooks
        self._stop = stop
        # The task as given, for the hooks that check it before the first call (none: None).
        self._task = tuple(opening) if state is None and self.hooks.before_run else None
        if state is None:
            budget = Budget.start(options.max_turns, options.return_retries)
            task = None
            if budget.phase is Phase.MUST_RETURN:
                task = opening
                warning = must_return_warning(parts.templates, budget, bool(parts.toolbox))
                opening = with_notice(opening, parts.notice(warning))
            self.live = LiveRun.fresh(budget, options.context_policy, systems, opening)
            if task is not None:
                self.live.joined_notice(task, opening)
        else:
            self.live = LiveRun.thaw(state)
            if self.live.pending is not None:  # the decisions are given: the turn goes on
                advance(self.live.budget, Trigger.RESUMED)
        self.decisions = decisions
        self.depth = current_depth() + 1  # how deep this run is nested (0: top level)
        self.observer = observer_for_run(
            parts.name, options.llm, options.tracer_provider, options.on_event, options.on_text,
            events, parts.toolbox.tools, nested=self.depth > 0,
        )  # fmt: skip
        self.in_flight: tuple[list[ToolCall], list[ToolRun | None]] | None = None
        self._reply_usage = _NO_USAGE  # the turn under way's reply, for a RunContext
        self._started = 0.0

    # --- the loop ---

    async def execute(self) -> Step[Any]:
        self._started = time.perf_counter()
        options, live = self.options, self.live
        # A resumed part is a trace of its own, its run span linked to the first part's.
        with self.observer.run(options.max_turns, options.return_retries, live.budget.state,
                               live.resumed, live.traceparent) as run:  # fmt: skip
            try:
                if options.mission_timeout is None and self._stop is None:
                    if self._task is not None:
                        await self._screen()
                    budget = live.budget
                    while budget.active:  # the common case, inline: no frame of its own
                        await self._turn()
                else:
                    await self._turns_until_done()
            except SubAgentError as exc:
                exc.turns = tuple(live.turns)
                raise
            except Exception as exc:
                error = self._callback_error(exc)
                if error is None or error is exc:
                    raise
                raise error from None  # alone, not inside a task group's ExceptionGroup
            step = build_step(
                agent=self.parts.name, output=live.output, failure=live.failure,
                turns=live.turns, max_turns=options.max_turns,
                return_retries=options.return_retries, duration_s=self._elapsed(),
                state=self.snapshot() if live.budget.state == Phase.PAUSED else None,
                messages=live.messages(),
            )  # fmt: skip
            try:
                run.finished(step)
            except Exception as exc:
                self._callback_error(exc)
                raise
        return step

    def _callback_error(self, exc: Exception) -> BaseException | None:
        """The user callback's own exception behind ``exc``, given the turns made so far."""
        error = callback_error(exc)
        if error is not None:
            error.turns = tuple(self.live.turns)  # type: ignore[attr-defined]
        return error

    async def _turns_until_done(self) -> None:
        """Take turns until the budget says stop, the mission timeout, or a stop."""
        mission, stop = self.options.mission_timeout, self._stop
        with stop if stop is not None else anyio.CancelScope() as stopping:
            with anyio.move_on_after(math.inf if mission is None else mission) as timer:
                if self._task is not None:
                    await self._screen()
                while self.live.budget.active:
                    await self._turn()
        if timer.cancelled_caught:
            message = f"the run did not finish within mission_timeout={mission:g} s"
            self._abort(Trigger.TIMED_OUT, message, ErrorKind.TIMEOUT)
        elif stopping.cancelled_caught:
            self._abort(Trigger.STOPPED, "the run was stopped before it finished", None)

    def _abort(self, trigger: Trigger, message: str, error_kind: ErrorKind | None) -> None:
        """End a run cut short from outside its turns (a mission timeout, a stop, a limit)."""
        live = self.live
        if live.budget.active:
            advance(live.budget, trigger)
            live.failure = failure(live, message, error_kind)
        last = live.turns[-1] if live.turns else None
        if last is not None and last.error_type == "cancelled":
            live.turns[-1] = ended_by(last, message)

    async def _screen(self) -> None:
        """The hooks' check of the task before the first call: a refusal ends the run."""
        task, self._task = self._task, None
        assert task is not None
        for check in self.hooks.before_run:
            reason = await check(task, self._opening_context)
            if reason is not None:
                self._abort(Trigger.INPUT_REFUSED, reason, None)
                return

    def _opening_context(self) -> RunContext[Any]:
        """The :class:`RunContext` before the first turn (turn 0)."""
        return replace(self.run_context(), turn=0)

    # --- one turn, in stages ---

    async def _turn(self) -> None:
        begun = self._begun()
        if begun is None:
            return
        draft, request, batch = begun
        with self.observer.turn(draft.start) as observed:
            # One coroutine frame for the whole turn (thousands of runs wait in it at once).
            verdict: Verdict | None = None
            try:
                try:
                    verdict = await self._stages(draft, request, batch)
                except BaseExceptionGroup as group:  # a bug in one of parallel tool calls
                    bug = _bug_in(group)
                    if bug is None:
                        raise
                    raise bug from group
                feedback_text = apply(self.live, self.parts, self.options, verdict,
                                      draft.response)  # fmt: skip
            except anyio.get_cancelled_exc_class():
                self._record(observed, draft.cut_short(*self._interrupted(draft.response)))
                raise
            except SubAgentError as exc:  # a bug in user code: raised, its turn kept
                self._record(observed, draft.broken(exc, self.live.budget,
                                                    *self._done(verdict, draft)))  # fmt: skip
                raise
            except Exception as exc:  # a bug in the model's code or the approval policy
                if not user_code_error(exc):
                    raise
                cut = self._interrupted(draft.response)
                self._record(observed, draft.broken(exc, self.live.budget, *cut))
                raise
            self._record(observed, draft.finished(verdict, feedback_text, self.live.budget))
        if self.hooks.after_turn and self.live.budget.state not in _FINAL:
            turn = self.live.turns[-1]
            for hook in self.hooks.after_turn:
                hook(turn, self.snapshot, self.run_context)

    def _begun(self) -> tuple[TurnDraft, LLMRequest | None, ToolBatch | None] | None:
        """The turn's draft and what it starts from; ``None`` when a hook ended the run."""
        pending = self.live.pending
        if pending is not None:  # a paused turn, its decisions given: the tool stage
            draft, batch = reentered(self.live, self.parts, pending, self.decisions)
            return draft, None, batch
        for check in self.hooks.before_call:
            reason = check(self.run_context)
            if reason is not None:
                self._abort(Trigger.LIMIT_REACHED, reason, None)
                return None
        request, draft = prepared(self.live, self.parts, self.options)
        return draft, request, None

    def _done(
        self, verdict: Verdict | None, draft: TurnDraft
    ) -> tuple[list[ToolCall], list[ToolResult]]:
        """The calls a broken turn made and their results (those of its verdict, if any)."""
        if verdict is not None and verdict.calls is not None:
            return verdict.calls, list(verdict.results)
        return self._interrupted(draft.response)

    async def _stages(
        self, draft: TurnDraft, request: LLMRequest | None, batch: ToolBatch | None
    ) -> Verdict:
        """Call the model, judge its reply, run the calls it asks for (or a resumed batch)."""
        if batch is not None:
            assert draft.response is not None
            return await run_batch(self, draft.response, batch)
        assert request is not None
        options = self.options
        try:
            llm = draft.llm or options.llm
            response = await call_model(llm, request, options.retry_policy, options.timeout,
                                        self.observer, draft, llm is not options.llm)  # fmt: skip
        except LLMError as exc:
            trigger = Trigger.TIMED_OUT if exc.kind is ErrorKind.TIMEOUT else Trigger.LLM_FAILED
            return Ended(trigger, str(exc), exc.kind.value, exc.kind)
        checks = self.hooks.after_reply
        if checks:
            # The model that produced the reply: a fallback's member, or the turn's model.
            model = response.model_name or draft.model
            for check in checks:
                reason = check(response, model, self.run_context)
                if reason is not None:
                    calls = list(response.tool_calls) or None
                    return Ended(Trigger.LIMIT_REACHED, reason, "usage_limit", calls=calls)
        self._reply_usage = response.usage  # counted in the usage a RunContext shows
        read = await judge_reply(self, response, draft.start.index)
        if isinstance(read, ToolBatch):
            return await run_batch(self, response, read)
        if isinstance(read, GaveUp) and not may_give_up(
            self.parts.allow_fail, options.correction, draft.corrected
        ):
            # The turn must answer: giving up is fed back as an answer to correct.
            refused = self.parts.templates.render("fail_not_allowed", reason=read.error)
            return Missed(refused, "explicit_fail_refused")
        return read

    def _record(self, observed: TurnScope, turn: Turn) -> None:
        self.live.turns.append(turn)
        observed.ended(turn)

    def _interrupted(self, response: LLMResponse | None) -> tuple[list[ToolCall], list[ToolResult]]:
        """The calls of a turn cut short, and their results: those that came, then the rest."""
        in_flight, self.in_flight = self.in_flight, None
        return interrupted(in_flight, response)

    # --- what the stages and hooks ask of the run ---

    def snapshot(self) -> RunState:
        """The run's state now, between two turns (or paused): see :class:`RunState`."""
        options = self.options
        return self.live.freeze(
            self.parts.name, self.parts.fingerprint(), options.max_turns,
            options.return_retries, options.context_policy, self._elapsed(),
            current_traceparent(),
        )  # fmt: skip

    def _elapsed(self) -> float:
        return self.live.elapsed + time.perf_counter() - self._started

    def run_context(self) -> RunContext[Any]:
        """The :class:`RunContext` of the turn under way (for tools and validators)."""
        return self.live.run_context(self.options.deps, self.parts.name, self.depth,
                                     self._reply_usage)  # fmt: skip

    def enter_user_code(self) -> Any:
        """Make this run the one a tool or validator's runs nest in; and tell the hooks."""
        options = self.options
        token = enter_run(options.llm, options.tracer_provider, self.depth)
        users = self.hooks.user_code
        if not users:
            return token
        return (token, [hook.enter_user_code() for hook in users])

    def leave_user_code(self, token: Any) -> None:
        """Undo :meth:`enter_user_code`."""
        if type(token) is tuple:
            token, held = token
            for hook, value in zip(reversed(self.hooks.user_code), reversed(held), strict=True):
                hook.leave_user_code(value)
        leave_run(token)


_FINAL = (Phase.DONE.value, Phase.FAILED.value)
_NO_USAGE = LLMResponse.model_fields["usage"].get_default(call_default_factory=True)


def _bug_in(group: BaseExceptionGroup[Any]) -> SubAgentError | None:
    """The error of a bug in user code that ended a task group, when that is all it holds."""
    errors = group.exceptions
    if errors and all(isinstance(error, SubAgentError) for error in errors):
        first = errors[0]
        assert isinstance(first, SubAgentError)
        return first
    return None
