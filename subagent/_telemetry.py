"""Spans and events of a run: the OpenTelemetry API only, and the ``on_event`` callback.

The library never installs a tracer provider. A run traces to the provider it is given, or
to the global one once an application has configured it; with neither (the API's proxy or
no-op provider) and no ``on_event`` handler, the turn loop skips this module entirely.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import anyio
from opentelemetry import trace
from opentelemetry.trace import ProxyTracerProvider, Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.util.types import AttributeValue

from subagent import __about__
from subagent._errors import LLMError
from subagent._events import EventHandler, RunEnded, RunStarted, TurnEnded, TurnStarted
from subagent._records import Step, ToolResult, TransportRetry, TurnOutcome
from subagent._text import shorten
from subagent.llm import LLMRequest, LLMResponse, Message, ToolCall

__all__ = ["CAPTURE_CONTENT_ENV", "Telemetry"]

CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_ERROR_TEXT_LIMIT = 1_000
_CONTENT_LIMIT = 16_384
_TRACERS: dict[int, tuple[trace.TracerProvider, Tracer]] = {}


def _tracer_for(provider: trace.TracerProvider | None) -> Tracer | None:
    if provider is None:
        provider = trace.get_tracer_provider()
        if isinstance(provider, ProxyTracerProvider | trace.NoOpTracerProvider):
            return None  # nothing configured: tracing costs nothing
    cached = _TRACERS.get(id(provider))
    if cached is not None and cached[0] is provider:
        return cached[1]
    tracer = provider.get_tracer("subagent", __about__.__version__)
    _TRACERS[id(provider)] = (provider, tracer)
    return tracer


def _capture_content() -> bool:
    return os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() in ("true", "1", "yes")


def _is_cancellation(exc: BaseException | None) -> bool:
    return exc is not None and isinstance(exc, anyio.get_cancelled_exc_class())


def _set_error(span: Span, error_type: str, description: str) -> None:
    span.set_attribute("error.type", error_type)
    span.set_status(Status(StatusCode.ERROR, shorten(description, _ERROR_TEXT_LIMIT)))


def _end_on_exception(span: Span, exc: BaseException) -> None:
    if _is_cancellation(exc):
        _set_error(span, "cancelled", "cancelled")
    else:
        _set_error(span, type(exc).__qualname__, f"{type(exc).__name__}: {exc}")


def _messages_json(messages: Sequence[Message]) -> str:
    payload = [m.model_dump(exclude_defaults=True) for m in messages]
    return shorten(json.dumps(payload, ensure_ascii=False, default=str), _CONTENT_LIMIT)


class Telemetry:
    """The observers of one run: a tracer, an event handler, or both.

    Build it with :meth:`for_run`, which returns ``None`` when nobody listens.
    """

    __slots__ = ("_agent", "_capture", "_on_event", "_tracer")

    def __init__(self, agent: str, tracer: Tracer | None, on_event: EventHandler | None):
        self._agent = agent
        self._tracer = tracer
        self._on_event = on_event
        self._capture = tracer is not None and _capture_content()

    @classmethod
    def for_run(
        cls,
        agent: str,
        tracer_provider: trace.TracerProvider | None,
        on_event: EventHandler | None,
    ) -> Telemetry | None:
        """The run's telemetry, or ``None`` if there is no tracer and no handler."""
        tracer = _tracer_for(tracer_provider)
        if tracer is None and on_event is None:
            return None
        return cls(agent, tracer, on_event)

    @staticmethod
    def activate(span: Span | None) -> AbstractContextManager[Any]:
        """Make ``span`` current for the block (children nest under it); it is not ended."""
        if span is None:
            return nullcontext()
        return trace.use_span(span, end_on_exit=False, record_exception=False,
                              set_status_on_exception=False)  # fmt: skip

    # --- run ---

    def start_run(self, started: RunStarted, provider: str | None) -> Span | None:
        """Emit ``RunStarted`` and open ``invoke_agent {agent}``."""
        if self._on_event is not None:
            self._on_event(started)
        if self._tracer is None:
            return None
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": started.agent,
            "subagent.max_turns": started.max_turns,
            "subagent.return_retries": started.return_retries,
            "subagent.phase.initial": started.phase,
        }
        if provider:
            attributes["gen_ai.provider.name"] = provider
        return self._tracer.start_span(
            f"invoke_agent {started.agent}", kind=SpanKind.INTERNAL, attributes=attributes
        )

    def end_run(self, span: Span | None, step: Step[Any] | None, exc: BaseException | None) -> None:
        """Close the run span with the outcome; emit ``RunEnded`` when there is a step."""
        try:
            if step is not None and self._on_event is not None:
                self._on_event(RunEnded(self._agent, step))
        finally:
            if span is not None:
                try:
                    if step is not None:
                        self._describe_run(span, step)
                    elif exc is not None:
                        span.set_attribute("subagent.outcome", "failed")
                        reason = "cancelled" if _is_cancellation(exc) else "error"
                        span.set_attribute("subagent.failure.reason", reason)
                        _end_on_exception(span, exc)
                finally:
                    span.end()

    @staticmethod
    def _describe_run(span: Span, step: Step[Any]) -> None:
        span.set_attribute("subagent.outcome", "done" if step.ok else "failed")
        span.set_attribute("subagent.turns", len(step.turns))
        span.set_attribute("gen_ai.usage.input_tokens", step.usage.total.input_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", step.usage.total.output_tokens)
        if step.failure is not None:
            span.set_attribute("subagent.failure.reason", step.failure.reason.value)
            _set_error(span, step.failure.reason.value, step.failure.message)

    # --- turn ---

    def start_turn(self, started: TurnStarted) -> Span | None:
        """Emit ``TurnStarted`` and open ``agent_turn {type}`` under the current span."""
        if self._on_event is not None:
            self._on_event(started)
        if self._tracer is None:
            return None
        attributes: dict[str, AttributeValue] = {
            "subagent.turn.index": started.index,
            "subagent.turn.type": started.type.value,
            "subagent.phase.before": started.phase,
            "subagent.budget.work_remaining": started.work_remaining,
            "subagent.budget.retries_remaining": started.retries_remaining,
            "subagent.turn.tools_offered": started.tools_offered,
            "subagent.context.messages": started.messages,
            "subagent.context.collapsed": started.collapsed,
        }
        if started.attempt is not None and started.total is not None:
            attributes["subagent.retry.attempt"] = started.attempt
            attributes["subagent.retry.total"] = started.total
        return self._tracer.start_span(
            f"agent_turn {started.type.value}", kind=SpanKind.INTERNAL, attributes=attributes
        )

    def end_turn(
        self,
        span: Span | None,
        ended: TurnEnded | None,
        exc: BaseException | None,
        error_type: str | None = None,
    ) -> None:
        """Close the turn span; emit ``TurnEnded`` when the turn completed."""
        try:
            if ended is not None and self._on_event is not None:
                self._on_event(ended)
        finally:
            if span is not None:
                try:
                    if ended is not None:
                        self._describe_turn(span, ended, error_type)
                    elif exc is not None:
                        _end_on_exception(span, exc)
                finally:
                    span.end()

    @staticmethod
    def _describe_turn(span: Span, ended: TurnEnded, error_type: str | None) -> None:
        span.set_attribute("subagent.turn.outcome", ended.outcome.value)
        span.set_attribute("subagent.phase.after", ended.phase_after)
        span.set_attribute("subagent.budget.work_remaining", ended.work_remaining)
        span.set_attribute("subagent.budget.retries_remaining", ended.retries_remaining)
        if ended.stop_reason is not None:
            span.set_attribute("gen_ai.response.finish_reasons", (ended.stop_reason,))
        if ended.error is not None:
            span.set_attribute("subagent.turn.error", shorten(ended.error, _ERROR_TEXT_LIMIT))
        if ended.outcome in (TurnOutcome.ERROR, TurnOutcome.FAIL):
            _set_error(span, error_type or ended.outcome.value, ended.error or ended.outcome.value)

    # --- chat ---

    def start_chat(self, request: LLMRequest, llm: object) -> Span | None:
        """Open ``chat {model}`` (GenAI semantic conventions) under the current span."""
        if self._tracer is None:
            return None
        model = getattr(llm, "model_name", None) or "unknown"
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": model,
        }
        provider = getattr(llm, "provider_name", None)
        if provider:
            attributes["gen_ai.provider.name"] = provider
        address = getattr(llm, "server_address", None)
        if address:
            attributes["server.address"] = address
        port = getattr(llm, "server_port", None)
        if port:
            attributes["server.port"] = port
        for key in ("temperature", "max_tokens", "top_p", "seed"):
            value = request.settings.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                attributes[f"gen_ai.request.{key}"] = value
        if self._capture:
            attributes["gen_ai.input.messages"] = _messages_json(request.messages)
        return self._tracer.start_span(f"chat {model}", kind=SpanKind.CLIENT, attributes=attributes)

    @staticmethod
    def chat_retry(span: Span | None, retry: TransportRetry) -> None:
        """Record a transport retry as a span event."""
        if span is not None:
            span.add_event(
                "transport_retry",
                {
                    "error.type": retry.kind.value,
                    "subagent.retry.attempt": retry.attempt,
                    "subagent.retry.delay_s": retry.delay_s,
                    "exception.message": shorten(retry.message, _ERROR_TEXT_LIMIT),
                },
            )

    def end_chat(
        self,
        span: Span | None,
        response: LLMResponse | None,
        error: LLMError | None,
        exc: BaseException | None,
    ) -> None:
        """Close the chat span with the response's model, finish reason and usage."""
        if span is None:
            return
        try:
            if response is not None:
                if response.model:
                    span.set_attribute("gen_ai.response.model", response.model)
                span.set_attribute("gen_ai.response.finish_reasons", (response.stop_reason.value,))
                span.set_attribute("gen_ai.usage.input_tokens", response.usage.input_tokens)
                span.set_attribute("gen_ai.usage.output_tokens", response.usage.output_tokens)
                if self._capture:
                    span.set_attribute("gen_ai.output.messages", _messages_json([
                        Message(role="assistant", content=response.text,
                                tool_calls=tuple(response.tool_calls))
                    ]))  # fmt: skip
            elif error is not None:
                _set_error(span, error.kind.value, str(error))
            elif exc is not None:
                _end_on_exception(span, exc)
        finally:
            span.end()

    # --- tools ---

    def start_tool(self, call: ToolCall) -> Span | None:
        """Open ``execute_tool {name}`` under the current span."""
        if self._tracer is None:
            return None
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.id,
            "gen_ai.tool.type": "function",
        }
        if self._capture:
            arguments = (
                call.arguments
                if isinstance(call.arguments, str)
                else json.dumps(call.arguments, ensure_ascii=False, default=str)
            )
            attributes["gen_ai.tool.call.arguments"] = shorten(arguments, _CONTENT_LIMIT)
        return self._tracer.start_span(
            f"execute_tool {call.name}", kind=SpanKind.INTERNAL, attributes=attributes
        )

    def end_tool(
        self, span: Span | None, result: ToolResult | None, exc: BaseException | None
    ) -> None:
        """Close the tool span; failed calls get status ERROR and ``error.type``."""
        if span is None:
            return
        try:
            if result is not None:
                if not result.ok:
                    _set_error(span, result.error_type or "tool_error", result.content)
                elif self._capture:
                    span.set_attribute(
                        "gen_ai.tool.call.result", shorten(result.content, _CONTENT_LIMIT)
                    )
            elif exc is not None:
                _end_on_exception(span, exc)
        finally:
            span.end()
