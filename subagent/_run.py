"""The turn loop: one run of an agent, driven by the phase machine.

Each turn: build the request for the current phase (tools stripped outside ``normal``),
call the model (transport retries inside the turn), judge the reply (tool turn, explicit
fail, or return attempt), fire the machine's trigger, and write the feedback the next turn
needs. The machine decides the next phase; this module only awaits and records.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
from opentelemetry.trace import Span, TracerProvider

from subagent._conversation import ContextPolicy, Conversation
from subagent._errors import ErrorKind, LLMError, SubAgentError
from subagent._phases import Budget, Phase, advance
from subagent._records import (
    FailReason,
    Failure,
    Step,
    ToolResult,
    Turn,
    TurnOutcome,
    TurnType,
    build_step,
)
from subagent._templates import TemplateSet
from subagent._text import fence
from subagent.llm import (
    LLM,
    LLMRequest,
    LLMResponse,
    Message,
    RetryPolicy,
    StopReason,
    ToolCall,
    ToolDefinition,
    TransportRetry,
    TurnInfo,
    call_with_retries,
)
from subagent.observe import EventHandler, RunStarted, Telemetry, TurnEnded, TurnStarted
from subagent.parsers import (
    OutputContract,
    ParseResult,
    detect_explicit_fail,
    format_validation_errors,
    run_validators,
)
from subagent.tools import Tool, ToolArgumentsError, render_result

__all__ = ["AgentParts", "RunOptions", "execute_run"]


@dataclass(frozen=True, slots=True)
class AgentParts:
    """What a run needs from its :class:`~subagent.SubAgent`, prepared once per agent."""

    name: str
    templates: TemplateSet
    contract: OutputContract
    tools: Mapping[str, Tool]
    tool_definitions: list[ToolDefinition]
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
    """What the runtime made of one reply."""

    outcome: TurnOutcome
    trigger: str
    error: str | None = None
    error_type: str | None = None
    tool_results: list[ToolResult] = field(default_factory=list)
    output: Any = None
    failure: Failure | None = None
    is_tool_turn: bool = False
    tool_messages: list[Message] = field(default_factory=list)


async def execute_run(parts: AgentParts, options: RunOptions, opening: list[Message]) -> Step[Any]:
    """Run the agent to ``done`` or ``failed`` and return its :class:`Step`."""
    return await _Run(parts, options, opening).execute()


class _Run:
    __slots__ = (
        "_budget",
        "_conversation",
        "_failure",
        "_options",
        "_output",
        "_parts",
        "_started",
        "_telemetry",
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
        self._telemetry = Telemetry.for_run(parts.name, options.tracer_provider, options.on_event)
        self._started = 0.0

    # --- the loop ---

    async def execute(self) -> Step[Any]:
        self._started = time.perf_counter()
        telemetry = self._telemetry
        if telemetry is None:
            return await self._execute_untraced()
        span = telemetry.start_run(
            RunStarted(self._parts.name, self._options.max_turns, self._options.return_retries,
                       self._budget.state),
            getattr(self._options.llm, "provider_name", None),
        )  # fmt: skip
        step: Step[Any] | None = None
        error: BaseException | None = None
        try:
            with telemetry.activate(span):
                step = await self._execute_untraced()
            return step
        except BaseException as exc:
            error = exc
            raise
        finally:
            telemetry.end_run(span, step, error)

    async def _execute_untraced(self) -> Step[Any]:
        try:
            if self._options.mission_timeout is None:
                await self._turn_loop()
            else:
                with anyio.move_on_after(self._options.mission_timeout) as scope:
                    await self._turn_loop()
                if scope.cancelled_caught:
                    self._abort_on_mission_timeout()
        except SubAgentError as exc:
            exc.turns = tuple(self._turns)
            raise
        return build_step(
            agent=self._parts.name,
            output=self._output,
            failure=self._failure,
            turns=self._turns,
            max_turns=self._options.max_turns,
            return_retries=self._options.return_retries,
            duration_s=time.perf_counter() - self._started,
        )

    async def _turn_loop(self) -> None:
        while self._budget.active:
            await self._take_turn()

    def _abort_on_mission_timeout(self) -> None:
        message = (
            f"the run did not finish within mission_timeout={self._options.mission_timeout:g} s"
        )
        if self._budget.active:
            advance(self._budget, "aborted", reason=FailReason.TIMEOUT)
        self._failure = Failure(reason=FailReason.TIMEOUT, message=message,
                                error_kind=ErrorKind.TIMEOUT)  # fmt: skip
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
        tools = self._parts.tool_definitions if offer_tools else []
        system = self._parts.system_with_tools if offer_tools else self._parts.system_without_tools
        messages = (system, *self._conversation.messages())
        collapsed = self._conversation.collapsed
        request = LLMRequest(
            messages=messages,
            tools=tools,
            tool_choice="none" if tools and phase is not Phase.NORMAL else None,
            settings=self._options.settings,
            turn=TurnInfo(index=index, type=turn_type.value, agent=self._parts.name),
        )
        telemetry = self._telemetry
        span: Span | None = None
        if telemetry is not None:
            in_retry = phase is Phase.RETRY
            span = telemetry.start_turn(TurnStarted(
                agent=self._parts.name, index=index, type=turn_type, phase=phase.value,
                work_remaining=budget.work_remaining, retries_remaining=budget.retries_remaining,
                tools_offered=len(tools), messages=len(messages), collapsed=collapsed,
                attempt=budget.retry_attempt if in_retry else None,
                total=budget.retry_total if in_retry else None,
            ))  # fmt: skip
        started = time.perf_counter()
        retries: list[TransportRetry] = []
        response: LLMResponse | None = None
        turn: Turn | None = None
        verdict: _Verdict | None = None
        error: BaseException | None = None
        try:
            with Telemetry.activate(span):
                try:
                    response = await self._call(request, retries)
                except LLMError as exc:
                    verdict = self._llm_failure(exc)
                else:
                    verdict = await self._judge(response, index)
            feedback = self._apply(verdict, response, index)
            turn = Turn(
                index=index,
                type=turn_type,
                outcome=verdict.outcome,
                phase_before=phase.value,
                phase_after=budget.state,
                reply=response.text if response else "",
                tool_calls=list(response.tool_calls) if response else [],
                tool_results=verdict.tool_results,
                error=verdict.error,
                error_type=verdict.error_type,
                feedback=feedback,
                stop_reason=response.stop_reason if response else None,
                raw_stop_reason=response.raw_stop_reason if response else None,
                usage=response.usage if response else _NO_USAGE,
                messages_sent=len(messages),
                messages_collapsed=collapsed,
                work_remaining=budget.work_remaining,
                retries_remaining=budget.retries_remaining,
                transport_retries=retries,
                duration_s=time.perf_counter() - started,
            )
            self._turns.append(turn)
        except BaseException as exc:
            error = exc
            if isinstance(exc, anyio.get_cancelled_exc_class()):
                turn = self._record_interrupted(index, turn_type, phase, response, messages,
                                                collapsed, retries, started)  # fmt: skip
            raise
        finally:
            if telemetry is not None:
                ended = None
                if turn is not None:
                    ended = TurnEnded(
                        agent=self._parts.name, index=index, type=turn_type, outcome=turn.outcome,
                        phase_before=phase.value, phase_after=turn.phase_after,
                        work_remaining=turn.work_remaining,
                        retries_remaining=turn.retries_remaining, error=turn.error,
                        stop_reason=turn.stop_reason.value if turn.stop_reason else None,
                        duration_s=turn.duration_s,
                    )  # fmt: skip
                error_type = turn.error_type if turn is not None else None
                telemetry.end_turn(span, ended, error, error_type)

    def _record_interrupted(
        self,
        index: int,
        turn_type: TurnType,
        phase: Phase,
        response: LLMResponse | None,
        messages: tuple[Message, ...],
        collapsed: int,
        retries: list[TransportRetry],
        started: float,
    ) -> Turn:
        """Keep a turn cut short by cancellation (a mission timeout) in the record."""
        turn = Turn(
            index=index, type=turn_type, outcome=TurnOutcome.FAIL, phase_before=phase.value,
            phase_after=phase.value, reply=response.text if response else "",
            error="cancelled before the turn completed", error_type="cancelled",
            stop_reason=response.stop_reason if response else None,
            usage=response.usage if response else _NO_USAGE, messages_sent=len(messages),
            messages_collapsed=collapsed, work_remaining=self._budget.work_remaining,
            retries_remaining=self._budget.retries_remaining, transport_retries=retries,
            duration_s=time.perf_counter() - started,
        )  # fmt: skip
        self._turns.append(turn)
        return turn

    async def _call(self, request: LLMRequest, retries: list[TransportRetry]) -> LLMResponse:
        telemetry = self._telemetry
        if telemetry is None:
            return await self._call_llm(request, retries.append)
        span = telemetry.start_chat(request, self._options.llm)

        def on_retry(retry: TransportRetry) -> None:
            retries.append(retry)
            telemetry.chat_retry(span, retry)

        response: LLMResponse | None = None
        llm_error: LLMError | None = None
        error: BaseException | None = None
        try:
            with Telemetry.activate(span):
                response = await self._call_llm(request, on_retry)
            return response
        except LLMError as exc:
            llm_error = exc
            raise
        except BaseException as exc:
            error = exc
            raise
        finally:
            telemetry.end_chat(span, response, llm_error, error)

    async def _call_llm(
        self, request: LLMRequest, on_retry: Callable[[TransportRetry], None]
    ) -> LLMResponse:
        options = self._options
        return await call_with_retries(
            options.llm, request, options.retry_policy, options.timeout, on_retry, options.on_text
        )

    # --- judging a reply ---

    def _llm_failure(self, exc: LLMError) -> _Verdict:
        reason = FailReason.TIMEOUT if exc.kind is ErrorKind.TIMEOUT else FailReason.LLM_ERROR
        return _Verdict(
            TurnOutcome.FAIL, "aborted", error=str(exc), error_type=exc.kind.value,
            failure=Failure(reason=reason, message=str(exc), error_kind=exc.kind),
        )  # fmt: skip

    async def _judge(self, response: LLMResponse, index: int) -> _Verdict:
        if response.stop_reason is StopReason.CONTENT_FILTER:
            message = "the provider's content filter blocked the reply"
            return _Verdict(
                TurnOutcome.FAIL, "aborted", error=message, error_type="content_filter",
                failure=Failure(reason=FailReason.LLM_ERROR, message=message,
                                error_kind=ErrorKind.CONTENT_FILTER),
            )  # fmt: skip
        if response.tool_calls:
            if self._budget.phase is Phase.NORMAL:
                return await self._run_tools(response, index)
            return self._refuse_tools(response)
        return await self._judge_return(response)

    async def _judge_return(self, response: LLMResponse) -> _Verdict:
        templates = self._parts.templates
        text = response.text
        if response.stop_reason is StopReason.LENGTH:
            return _Verdict(TurnOutcome.ERROR, "missed", templates.render("truncated_reply"),
                            "truncated")  # fmt: skip
        reason = detect_explicit_fail(text, max_chars=self._parts.contract.max_reply_chars)
        if reason is not None:
            return _Verdict(
                TurnOutcome.FAIL, "gave_up", error=reason, error_type="explicit_fail",
                failure=Failure(reason=FailReason.EXPLICIT_FAIL, message=reason),
            )  # fmt: skip
        parsed: ParseResult = self._parts.contract.parse(text, templates)
        if not parsed.ok:
            return _Verdict(TurnOutcome.ERROR, "missed", parsed.feedback, "invalid_output")
        value = parsed.value
        if self._parts.validators:
            validation = await run_validators(self._parts.validators, value)
            if not validation.valid:
                error = templates.render("validation_failed", errors=list(validation.errors))
                return _Verdict(TurnOutcome.ERROR, "missed", error, "validation_failed")
        return _Verdict(TurnOutcome.SUCCESS, "returned", output=value)

    def _refuse_tools(self, response: LLMResponse) -> _Verdict:
        names = ", ".join(sorted({call.name for call in response.tool_calls}))
        error = self._parts.templates.render("tools_unavailable", tool_names=names)
        results = [
            ToolResult(call_id=call.id, name=call.name, ok=False, content=error,
                       error_type="tools_unavailable", duration_s=0.0)
            for call in response.tool_calls
        ]  # fmt: skip
        return _Verdict(TurnOutcome.ERROR, "missed", error, "tools_unavailable",
                        tool_results=results)  # fmt: skip

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
        tool_messages = [assistant] + [
            Message(role="tool", content=result.content, tool_call_id=result.call_id,
                    name=result.name)
            for result in done
        ]  # fmt: skip
        failed = [result for result in done if not result.ok]
        if failed:
            error = "\n".join(f"{result.name}: {result.error_type}" for result in failed)
            return _Verdict(TurnOutcome.ERROR, "missed", error, "tool_error", tool_results=done,
                            is_tool_turn=True, tool_messages=tool_messages)  # fmt: skip
        return _Verdict(TurnOutcome.CONTINUE, "missed", tool_results=done, is_tool_turn=True,
                        tool_messages=tool_messages)  # fmt: skip

    async def _run_tool(self, call: ToolCall) -> ToolResult:
        telemetry = self._telemetry
        span = telemetry.start_tool(call) if telemetry is not None else None
        result: ToolResult | None = None
        error: BaseException | None = None
        try:
            with Telemetry.activate(span):
                result = await self._invoke_tool(call)
            return result
        except BaseException as exc:
            error = exc
            raise
        finally:
            if telemetry is not None:
                telemetry.end_tool(span, result, error)

    async def _invoke_tool(self, call: ToolCall) -> ToolResult:
        templates = self._parts.templates
        tool = self._parts.tools.get(call.name)
        started = time.perf_counter()
        if tool is None:
            content = templates.render(
                "unknown_tool", name=call.name, available=", ".join(self._parts.tools) or "none"
            )
            return ToolResult(call_id=call.id, name=call.name, ok=False, content=content,
                              error_type="unknown_tool")  # fmt: skip
        try:
            value = await tool.call(call.arguments)
        except ToolArgumentsError as exc:
            errors = (
                format_validation_errors(exc.validation)
                if exc.validation is not None
                else [{"location": "(arguments)", "message": str(exc), "received": ""}]
            )
            content = templates.render("tool_arguments_invalid", name=call.name, errors=errors)
            return ToolResult(call_id=call.id, name=call.name, ok=False, content=content,
                              error_type="invalid_arguments",
                              duration_s=time.perf_counter() - started)  # fmt: skip
        except Exception as exc:
            text = f"{type(exc).__name__}: {exc}"
            content = templates.render("tool_error", name=call.name, error=text, fence=fence(text),
                                       hint="")  # fmt: skip
            return ToolResult(call_id=call.id, name=call.name, ok=False, content=content,
                              error_type=type(exc).__name__,
                              duration_s=time.perf_counter() - started)  # fmt: skip
        text = render_result(value)
        content = templates.render("tool_result", name=call.name, content=text, fence=fence(text))
        return ToolResult(call_id=call.id, name=call.name, ok=True, content=content,
                          duration_s=time.perf_counter() - started)  # fmt: skip

    # --- moving on ---

    def _apply(self, verdict: _Verdict, response: LLMResponse | None, index: int) -> str | None:
        """Fire the verdict's trigger; write what the next turn needs. Returns the feedback."""
        budget = self._budget
        advance(budget, verdict.trigger, **({"reason": verdict.failure.reason}
                                              if verdict.trigger == "aborted" and verdict.failure
                                              else {}))  # fmt: skip
        if verdict.outcome is TurnOutcome.SUCCESS:
            self._output = verdict.output
            return None
        if verdict.failure is not None:
            self._failure = verdict.failure
            return None
        next_phase = budget.phase
        if verdict.is_tool_turn:
            exchange = list(verdict.tool_messages)
            notice = None
            if next_phase is Phase.MUST_RETURN:
                notice = self._must_return_warning()
                exchange.append(self._user(notice))
            self._conversation.add_exchange(exchange)
            return notice
        assert verdict.error is not None
        assert response is not None
        feedback = self._feedback(verdict.error, next_phase)
        if next_phase is Phase.FAILED:
            self._failure = Failure(
                reason=FailReason.BUDGET_EXHAUSTED,
                message=(
                    f"no valid answer within max_turns={self._options.max_turns} and "
                    f"return_retries={self._options.return_retries}; last error: {verdict.error}"
                ),
            )
            return None
        self._conversation.add_failed_attempt(_as_reply(response), self._user(feedback))
        return feedback

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
            has_tools=bool(self._parts.tools),
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
