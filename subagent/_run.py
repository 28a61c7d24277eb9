"""The turn loop: one run of an agent, driven by the phase machine.

Each turn: build the request for the current phase (tools stripped outside ``normal``),
call the model (transport retries inside the turn), judge the reply (a tool turn, an
explicit fail, or a return attempt), fire the machine's trigger, and write the feedback the
next turn needs. The machine decides the next phase and why a run failed; this module only
awaits, judges and records. Whoever listens (spans, ``on_event``, ``on_text``) is told
through the run's :class:`~subagent.observe.Observer`, scope by scope.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
from opentelemetry.trace import TracerProvider

from subagent._conversation import ContextPolicy, Conversation
from subagent._errors import ErrorKind, LLMError, SubAgentError
from subagent._phases import Budget, Phase, Trigger, advance
from subagent._records import (
    Failure,
    Step,
    ToolResult,
    Turn,
    TurnOutcome,
    TurnType,
    build_step,
)
from subagent._templates import TemplateSet
from subagent.llm import (
    LLM,
    LLMRequest,
    LLMResponse,
    Message,
    RetryPolicy,
    StopReason,
    ToolCall,
    TransportRetry,
    TurnInfo,
    call_with_retries,
)
from subagent.observe import EventHandler, Observer, TurnScope, observer_for_run
from subagent.parsers import OutputContract, ParseResult, detect_explicit_fail, run_validators
from subagent.tools import Toolbox

__all__ = ["AgentParts", "RunOptions", "execute_run"]


@dataclass(frozen=True, slots=True)
class AgentParts:
    """What a run needs from its :class:`~subagent.SubAgent`, prepared once per agent."""

    name: str
    templates: TemplateSet
    contract: OutputContract
    toolbox: Toolbox
    validators: Sequence[Any]
    system_with_tools: Message
    system_without_tools: Message


@dataclass(frozen=True, slots=True)
class RunOptions:
    """The resolved options of one run."""

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


async def execute_run(parts: AgentParts, options: RunOptions, opening: list[Message]) -> Step[Any]:
    """Run the agent to ``done`` or ``failed`` and return its :class:`Step`."""
    return await _Run(parts, options, opening).execute()


class _Run:
    __slots__ = (
        "_budget",
        "_conversation",
        "_failure",
        "_observer",
        "_options",
        "_output",
        "_parts",
        "_started",
        "_turns",
    )  # fmt: skip

    def __init__(self, parts: AgentParts, options: RunOptions, opening: list[Message]):
        self._parts = parts
        self._options = options
        self._budget = Budget.start(options.max_turns, options.return_retries)
        if self._budget.phase is Phase.MUST_RETURN:
            opening = [*opening, self._user(self._must_return_warning())]
        self._conversation = Conversation(options.context_policy, opening)
        self._turns: list[Turn] = []
        self._output: Any = None
        self._failure: Failure | None = None
        self._observer: Observer = observer_for_run(
            parts.name, options.llm, options.tracer_provider, options.on_event, options.on_text
        )
        self._started = 0.0

    # --- the loop ---

    async def execute(self) -> Step[Any]:
        self._started = time.perf_counter()
        options = self._options
        with self._observer.run(
            options.max_turns, options.return_retries, self._budget.state
        ) as run:
            try:
                if options.mission_timeout is None:
                    await self._turn_loop()
                else:
                    with anyio.move_on_after(options.mission_timeout) as scope:
                        await self._turn_loop()
                    if scope.cancelled_caught:
                        self._abort_on_mission_timeout()
            except SubAgentError as exc:
                exc.turns = tuple(self._turns)
                raise
            step = build_step(
                agent=self._parts.name,
                output=self._output,
                failure=self._failure,
                turns=self._turns,
                max_turns=options.max_turns,
                return_retries=options.return_retries,
                duration_s=time.perf_counter() - self._started,
            )
            run.finished(step)
        return step

    async def _turn_loop(self) -> None:
        while self._budget.active:
            await self._take_turn()

    def _abort_on_mission_timeout(self) -> None:
        message = (
            f"the run did not finish within mission_timeout={self._options.mission_timeout:g} s"
        )
        if self._budget.active:
            advance(self._budget, Trigger.TIMED_OUT)
            self._failure = self._failed(message, ErrorKind.TIMEOUT)
        if self._turns and self._turns[-1].outcome is TurnOutcome.FAIL:
            self._turns[-1] = self._turns[-1].model_copy(
                update={"error": message, "phase_after": Phase.FAILED.value}
            )

    # --- one turn ---

    async def _take_turn(self) -> None:
        budget = self._budget
        phase = budget.phase
        turn_type = _TURN_TYPE[phase]
        index = len(self._turns) + 1
        offer_tools = phase is Phase.NORMAL or self._options.keep_tool_schemas
        parts = self._parts
        tools = parts.toolbox.definitions if offer_tools else []
        system = parts.system_with_tools if offer_tools else parts.system_without_tools
        messages = (system, *self._conversation.messages())
        collapsed = self._conversation.collapsed
        request = LLMRequest(
            messages=messages,
            tools=tools,
            tool_choice="none" if tools and phase is not Phase.NORMAL else None,
            settings=self._options.settings,
            turn=TurnInfo(index=index, type=turn_type.value, agent=parts.name),
        )
        in_retry = phase is Phase.RETRY
        started = time.perf_counter()
        retries: list[TransportRetry] = []
        response: LLMResponse | None = None
        with self._observer.turn(
            index, turn_type, budget.work_remaining, budget.retries_remaining,
            budget.retry_attempt if in_retry else None, budget.retry_total if in_retry else None,
            len(tools), len(messages), collapsed,
        ) as observed:  # fmt: skip
            try:
                try:
                    response = await self._call(request, retries)
                except LLMError as exc:
                    verdict = self._llm_failure(exc)
                else:
                    verdict = await self._judge(response, index)
            except anyio.get_cancelled_exc_class():
                self._record(observed, Turn(
                    index=index, type=turn_type, outcome=TurnOutcome.FAIL,
                    phase_after=phase.value, reply=response.text if response else "",
                    tool_calls=list(response.tool_calls) if response else [],
                    error="cancelled before the turn completed", error_type="cancelled",
                    stop_reason=response.stop_reason if response else None,
                    usage=response.usage if response else _NO_USAGE,
                    messages_sent=len(messages), messages_collapsed=collapsed,
                    work_remaining=budget.work_remaining,
                    retries_remaining=budget.retries_remaining, transport_retries=retries,
                    duration_s=time.perf_counter() - started,
                ))  # fmt: skip
                raise
            feedback = self._apply(verdict, response)
            self._record(observed, Turn(
                index=index, type=turn_type, outcome=verdict.outcome, phase_after=budget.state,
                reply=response.text if response else "",
                tool_calls=list(response.tool_calls) if response else [],
                tool_results=verdict.tool_results, error=verdict.error,
                error_type=verdict.error_type, feedback=feedback,
                stop_reason=response.stop_reason if response else None,
                raw_stop_reason=response.raw_stop_reason if response else None,
                usage=response.usage if response else _NO_USAGE, messages_sent=len(messages),
                messages_collapsed=collapsed, work_remaining=budget.work_remaining,
                retries_remaining=budget.retries_remaining, transport_retries=retries,
                duration_s=time.perf_counter() - started,
            ))  # fmt: skip

    def _record(self, observed: TurnScope, turn: Turn) -> None:
        self._turns.append(turn)
        observed.ended(turn)

    async def _call(self, request: LLMRequest, retries: list[TransportRetry]) -> LLMResponse:
        observer = self._observer
        options = self._options
        with observer.chat(request) as chat:

            def on_retry(retry: TransportRetry) -> None:
                retries.append(retry)
                chat.retried(retry)

            response = await call_with_retries(
                options.llm, request, options.retry_policy, options.timeout, on_retry,
                chat.text if observer.wants_text else None,
            )  # fmt: skip
            chat.replied(response)
        return response

    # --- judging a reply ---

    @staticmethod
    def _llm_failure(exc: LLMError) -> _Verdict:
        trigger = Trigger.TIMED_OUT if exc.kind is ErrorKind.TIMEOUT else Trigger.LLM_FAILED
        return _Verdict(TurnOutcome.FAIL, trigger, error=str(exc), error_type=exc.kind.value,
                        error_kind=exc.kind)  # fmt: skip

    async def _judge(self, response: LLMResponse, index: int) -> _Verdict:
        if response.stop_reason is StopReason.CONTENT_FILTER:
            message = "the provider's content filter blocked the reply"
            return _Verdict(TurnOutcome.FAIL, Trigger.LLM_FAILED, error=message,
                            error_type="content_filter",
                            error_kind=ErrorKind.CONTENT_FILTER)  # fmt: skip
        if response.tool_calls:
            if self._budget.phase is Phase.NORMAL:
                return await self._run_tools(response, index)
            error, results = self._parts.toolbox.refuse(response.tool_calls)
            return _Verdict(TurnOutcome.ERROR, Trigger.MISSED, error, "tools_unavailable",
                            tool_results=results)  # fmt: skip
        return await self._judge_return(response)

    async def _judge_return(self, response: LLMResponse) -> _Verdict:
        templates = self._parts.templates
        text = response.text
        if response.stop_reason is StopReason.LENGTH:
            return _Verdict(TurnOutcome.ERROR, Trigger.MISSED, templates.render("truncated_reply"),
                            "truncated")  # fmt: skip
        reason = detect_explicit_fail(text)
        if reason is not None:
            return _Verdict(TurnOutcome.FAIL, Trigger.GAVE_UP, error=reason,
                            error_type="explicit_fail")  # fmt: skip
        parsed: ParseResult = self._parts.contract.parse(text, templates)
        if not parsed.ok:
            return _Verdict(TurnOutcome.ERROR, Trigger.MISSED, parsed.feedback, "invalid_output")
        value = parsed.value
        if self._parts.validators:
            validation = await run_validators(self._parts.validators, value)
            if not validation.valid:
                error = templates.render("validation_failed", errors=list(validation.errors))
                return _Verdict(TurnOutcome.ERROR, Trigger.MISSED, error, "validation_failed")
        return _Verdict(TurnOutcome.SUCCESS, Trigger.RETURNED, output=value)

    async def _run_tools(self, response: LLMResponse, index: int) -> _Verdict:
        calls = [
            call if call.id else call.model_copy(update={"id": f"call_{index}_{position}"})
            for position, call in enumerate(response.tool_calls, start=1)
        ]
        results: list[ToolResult | None] = [None] * len(calls)
        if len(calls) == 1:
            results[0] = await self._run_tool(calls[0])
        else:

            async def run_one(position: int, call: ToolCall) -> None:
                results[position] = await self._run_tool(call)

            async with anyio.create_task_group() as group:
                for position, call in enumerate(calls):
                    group.start_soon(run_one, position, call)
        done = [result for result in results if result is not None]
        assistant = Message(role="assistant", content=response.text, tool_calls=tuple(calls))
        exchange = [assistant] + [
            Message(role="tool", content=result.content, tool_call_id=result.call_id,
                    name=result.name)
            for result in done
        ]  # fmt: skip
        failed = [result for result in done if not result.ok]
        if failed:
            error = "\n".join(f"{result.name}: {result.error_type}" for result in failed)
            return _Verdict(TurnOutcome.ERROR, Trigger.USED_TOOLS, error, "tool_error",
                            tool_results=done, tool_messages=exchange)  # fmt: skip
        return _Verdict(TurnOutcome.CONTINUE, Trigger.USED_TOOLS, tool_results=done,
                        tool_messages=exchange)  # fmt: skip

    async def _run_tool(self, call: ToolCall) -> ToolResult:
        with self._observer.tool(call) as observed:
            result = await self._parts.toolbox.run(call)
            observed.returned(result)
        return result

    # --- moving on ---

    def _apply(self, verdict: _Verdict, response: LLMResponse | None) -> str | None:
        """Fire the verdict's trigger; write what the next turn needs. Returns the feedback."""
        budget = self._budget
        next_phase = advance(budget, verdict.trigger)
        if next_phase is Phase.DONE:
            self._output = verdict.output
            return None
        if next_phase is Phase.FAILED:
            self._failure = self._failed(self._failure_message(verdict), verdict.error_kind)
            return None
        if verdict.tool_messages is not None:
            exchange = verdict.tool_messages
            notice = None
            if next_phase is Phase.MUST_RETURN:
                notice = self._must_return_warning()
                exchange.append(self._user(notice))
            self._conversation.add_exchange(exchange)
            return notice
        assert verdict.error is not None and response is not None
        feedback = self._feedback(verdict.error, next_phase)
        self._conversation.add_failed_attempt(_as_reply(response), self._user(feedback))
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
                                turns_left=budget.work_remaining)  # fmt: skip
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
        return Message(role="user", content=text)


_TURN_TYPE = {Phase(kind.value): kind for kind in TurnType}
_NO_USAGE = LLMResponse.model_fields["usage"].get_default(call_default_factory=True)


def _as_reply(response: LLMResponse) -> Message:
    """The failed reply as the assistant said it (tool calls described in text)."""
    text = response.text
    if response.tool_calls:
        calls = "\n".join(f"[call {call.name}({call.arguments})]" for call in response.tool_calls)
        text = f"{text}\n{calls}" if text else calls
    return Message(role="assistant", content=text)
