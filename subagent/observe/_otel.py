"""Spans and events of a run: the OpenTelemetry API only, and the ``on_event`` callback.

The library never installs a tracer provider. A run traces to the provider it is given, or
to the global one once an application has configured it; with neither (the API's proxy or
no-op provider) and no ``on_event`` handler, the turn loop skips this module entirely.

Spans (names are low-cardinality, attributes carry the detail):

- ``invoke_agent {agent}`` (INTERNAL): the run.
- ``agent_turn {type}`` (INTERNAL), a child of the run: one turn.
- ``chat {model}`` (CLIENT), a child of the turn: the LLM call, GenAI semantic conventions;
  transport retries are span events.
- ``execute_tool {tool}`` (INTERNAL), a child of the turn: one tool call. An agent used as a
  tool (``inner.as_tool()``) runs under it, so its run is a child of the tool span.

Every hook is on the run's path, so each does the least it can: one ``set_attributes`` call
per span end, the chat span's per-run attributes computed once, and message content
serialised only when :data:`CAPTURE_CONTENT_ENV` opts in.
"""

from __future__ import annotations

import json
import os
import weakref
from collections.abc import Sequence
from contextlib import AbstractContextManager
from contextvars import Token
from types import TracebackType
from typing import Any

import anyio
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import ProxyTracerProvider, Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.util.types import AttributeValue

from subagent.__about__ import __version__
from subagent._errors import LLMError
from subagent._records import Step, ToolResult, TurnOutcome
from subagent._text import shorten
from subagent.llm import LLMRequest, LLMResponse, Message, ToolCall, TransportRetry
from subagent.observe._events import EventHandler, RunEnded, RunStarted, TurnEnded, TurnStarted

__all__ = ["CAPTURE_CONTENT_ENV", "CONTENT_LIMIT", "ERROR_TEXT_LIMIT", "Telemetry"]

CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""Set to ``true`` to record prompts, replies, tool arguments and results on spans."""
ERROR_TEXT_LIMIT = 1_000
"""Characters kept of an error text (``subagent.turn.error``, status descriptions)."""
CONTENT_LIMIT = 16_384
"""Characters kept of one captured content attribute (valid JSON is kept valid)."""
_PART_LIMIT = 4_096
_TRACER_NAME = "subagent"
_SETTINGS = (
    ("temperature", "gen_ai.request.temperature"),
    ("max_tokens", "gen_ai.request.max_tokens"),
    ("top_p", "gen_ai.request.top_p"),
    ("seed", "gen_ai.request.seed"),
)
_ERROR_OUTCOMES = (TurnOutcome.ERROR, TurnOutcome.FAIL)
_TRACERS: weakref.WeakKeyDictionary[trace.TracerProvider, Tracer] = weakref.WeakKeyDictionary()


def _tracer_for(provider: trace.TracerProvider | None) -> Tracer | None:
    """The library's tracer from ``provider`` (default: the global one), or ``None``."""
    if provider is None:
        provider = trace.get_tracer_provider()
        if isinstance(provider, ProxyTracerProvider | trace.NoOpTracerProvider):
            return None  # nothing configured: tracing costs nothing
    try:
        tracer = _TRACERS.get(provider)
    except TypeError:  # a provider that cannot be weakly referenced: not cached
        return provider.get_tracer(_TRACER_NAME, __version__)
    if tracer is None:
        tracer = provider.get_tracer(_TRACER_NAME, __version__)
        _TRACERS[provider] = tracer
    return tracer


def capture_enabled() -> bool:
    """Whether :data:`CAPTURE_CONTENT_ENV` opts in to recording message content."""
    return os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() in ("true", "1", "yes")


def _is_cancellation(exc: BaseException | None) -> bool:
    return exc is not None and isinstance(exc, anyio.get_cancelled_exc_class())


def _fail(
    span: Span, attributes: dict[str, AttributeValue], error_type: str, description: str
) -> None:
    """Set ``error.type`` in ``attributes`` and the span's status to ERROR."""
    attributes["error.type"] = error_type
    span.set_status(Status(StatusCode.ERROR, shorten(description, ERROR_TEXT_LIMIT)))


def _exception_error(exc: BaseException) -> tuple[str, str]:
    """``(error.type, description)`` of an exception that ended a span early."""
    if _is_cancellation(exc):
        return "cancelled", "cancelled before it completed"
    return type(exc).__qualname__, f"{type(exc).__name__}: {exc}"


# --- message content (only when capture is on) ---


def _parts(message: Message) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    if message.role == "tool":
        parts.append({"type": "tool_call_response", "id": message.tool_call_id or "",
                      "response": shorten(message.content, _PART_LIMIT)})  # fmt: skip
        return parts
    if message.content:
        parts.append({"type": "text", "content": shorten(message.content, _PART_LIMIT)})
    for call in message.tool_calls:
        parts.append({"type": "tool_call", "id": call.id, "name": call.name,
                      "arguments": call.arguments})  # fmt: skip
    return parts


def _content_json(messages: list[dict[str, Any]]) -> str:
    """Messages as semconv JSON, at most :data:`CONTENT_LIMIT` characters, valid JSON.

    Over the limit, the oldest messages after the first (the system prompt) are left out;
    each message is serialised once.
    """
    encoded = [json.dumps(m, ensure_ascii=False, default=str) for m in messages]
    size = sum(len(item) for item in encoded) + len(encoded) + 1  # brackets and commas
    first_kept = 1
    while size > CONTENT_LIMIT and len(encoded) - first_kept > 1:
        size -= len(encoded[first_kept]) + 1
        first_kept += 1
    kept = encoded[:1] + encoded[first_kept:]
    text = "[" + ",".join(kept) + "]"
    return text if len(text) <= CONTENT_LIMIT else shorten(text, CONTENT_LIMIT)


def input_messages_json(messages: Sequence[Message]) -> str:
    """The request's messages in the GenAI semconv shape (``role`` + ``parts``)."""
    return _content_json([{"role": m.role, "parts": _parts(m)} for m in messages])


def output_messages_json(response: LLMResponse) -> str:
    """The reply in the GenAI semconv shape, with its finish reason."""
    message = Message.model_construct(role="assistant", content=response.text,
                                      tool_calls=tuple(response.tool_calls))  # fmt: skip
    return _content_json([{"role": "assistant", "parts": _parts(message),
                           "finish_reason": response.stop_reason.value}])  # fmt: skip


# --- making a span current ---


class _Activation:
    """Make a span current for a ``with`` block without ending it (cheaper than use_span)."""

    __slots__ = ("_span", "_token")
    _token: Token[Context]

    def __init__(self, span: Span):
        self._span = span

    def __enter__(self) -> Span:
        self._token = otel_context.attach(trace.set_span_in_context(self._span))
        return self._span

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        otel_context.detach(self._token)


class _Inactive:
    """The ``with`` block of a run that is not traced."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc_info: object) -> None:
        return None


_INACTIVE = _Inactive()


class Telemetry:
    """The observers of one run: a tracer, an event handler, or both.

    Build it with :meth:`for_run`, which returns ``None`` when nobody listens.
    """

    __slots__ = (
        "_agent",
        "_capture",
        "_chat_attributes",
        "_chat_llm",
        "_chat_name",
        "_on_event",
        "_tracer",
        "_turn_budget",
    )

    def __init__(self, agent: str, tracer: Tracer | None, on_event: EventHandler | None):
        self._agent = agent
        self._tracer = tracer
        self._on_event = on_event
        self._capture = tracer is not None and capture_enabled()
        self._chat_llm: object = None
        self._chat_attributes: dict[str, AttributeValue] = {}
        self._chat_name = "chat"
        self._turn_budget = (0, 0)  # the open turn's budget at its start (turns are sequential)

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
        """Make ``span`` current for the block (children nest under it); it is not ended.

        The context is attached on entry and detached on exit in the same task, also when
        the block is left by cancellation.
        """
        if span is None:
            return _INACTIVE
        return _Activation(span)

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
                        error_type, description = _exception_error(exc)
                        attributes: dict[str, AttributeValue] = {
                            "subagent.outcome": "failed",
                            "subagent.failure.reason": (
                                "cancelled" if _is_cancellation(exc) else "error"
                            ),
                        }
                        _fail(span, attributes, error_type, description)
                        span.set_attributes(attributes)
                finally:
                    span.end()

    @staticmethod
    def _describe_run(span: Span, step: Step[Any]) -> None:
        # Summed here rather than read from ``step.usage``, which may build pydantic models.
        input_tokens = output_tokens = 0
        for turn in step.turns:
            input_tokens += turn.usage.input_tokens
            output_tokens += turn.usage.output_tokens
        failure = step.failure
        attributes: dict[str, AttributeValue] = {
            "subagent.outcome": "done" if failure is None else "failed",
            "subagent.turns": len(step.turns),
            "gen_ai.usage.input_tokens": input_tokens,
            "gen_ai.usage.output_tokens": output_tokens,
        }
        if failure is not None:
            reason = failure.reason.value
            attributes["subagent.failure.reason"] = reason
            _fail(span, attributes, reason, failure.message)
        span.set_attributes(attributes)

    # --- turn ---

    def start_turn(self, started: TurnStarted) -> Span | None:
        """Emit ``TurnStarted`` and open ``agent_turn {type}`` under the current span."""
        if self._on_event is not None:
            self._on_event(started)
        if self._tracer is None:
            return None
        turn_type = started.type.value
        attributes: dict[str, AttributeValue] = {
            "subagent.turn.index": started.index,
            "subagent.turn.type": turn_type,
            "subagent.phase.before": started.phase,
            "subagent.turn.tools_offered": started.tools_offered,
            "subagent.context.messages": started.messages,
            "subagent.context.collapsed": started.collapsed,
        }
        self._turn_budget = (started.work_remaining, started.retries_remaining)
        if started.attempt is not None and started.total is not None:
            attributes["subagent.retry.attempt"] = started.attempt
            attributes["subagent.retry.total"] = started.total
        return self._tracer.start_span(
            f"agent_turn {turn_type}", kind=SpanKind.INTERNAL, attributes=attributes
        )

    def end_turn(
        self,
        span: Span | None,
        ended: TurnEnded | None,
        exc: BaseException | None,
        error_type: str | None = None,
    ) -> None:
        """Close the turn span; emit ``TurnEnded`` when the turn completed.

        The budget attributes say what is left after the turn (for a turn cut short by
        cancellation, what it started with: nothing was spent).
        """
        try:
            if ended is not None and self._on_event is not None:
                self._on_event(ended)
        finally:
            if span is not None:
                try:
                    if ended is not None:
                        self._describe_turn(span, ended, error_type)
                    elif exc is not None:
                        error, description = _exception_error(exc)
                        work, retries = self._turn_budget
                        attributes: dict[str, AttributeValue] = {
                            "subagent.turn.error": description,
                            "subagent.budget.work_remaining": work,
                            "subagent.budget.retries_remaining": retries,
                        }
                        _fail(span, attributes, error, description)
                        span.set_attributes(attributes)
                finally:
                    span.end()

    @staticmethod
    def _describe_turn(span: Span, ended: TurnEnded, error_type: str | None) -> None:
        outcome = ended.outcome
        attributes: dict[str, AttributeValue] = {
            "subagent.turn.outcome": outcome.value,
            "subagent.phase.after": ended.phase_after,
            "subagent.budget.work_remaining": ended.work_remaining,
            "subagent.budget.retries_remaining": ended.retries_remaining,
        }
        if ended.stop_reason is not None:
            attributes["gen_ai.response.finish_reasons"] = (ended.stop_reason,)
        error = ended.error
        if error is not None:
            attributes["subagent.turn.error"] = shorten(error, ERROR_TEXT_LIMIT)
        if outcome in _ERROR_OUTCOMES:
            _fail(span, attributes, error_type or outcome.value, error or outcome.value)
        span.set_attributes(attributes)

    # --- chat ---

    def _chat_base(self, request: LLMRequest, llm: object) -> dict[str, AttributeValue]:
        """The chat attributes that stay the same for the whole run (computed once)."""
        if self._chat_llm is llm:
            return self._chat_attributes
        model = str(getattr(llm, "model_name", None) or "unknown")
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": model,
        }
        provider = getattr(llm, "provider_name", None)
        if provider:
            attributes["gen_ai.provider.name"] = str(provider)
        address = getattr(llm, "server_address", None)
        if address:
            attributes["server.address"] = str(address)
        port = getattr(llm, "server_port", None)
        if isinstance(port, int) and not isinstance(port, bool) and port > 0:
            attributes["server.port"] = port
        for key, name in _SETTINGS:
            value = request.settings.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                attributes[name] = value
        self._chat_llm = llm
        self._chat_name = f"chat {model}"
        self._chat_attributes = attributes
        return attributes

    def start_chat(self, request: LLMRequest, llm: object) -> Span | None:
        """Open ``chat {model}`` (GenAI semantic conventions) under the current span."""
        if self._tracer is None:
            return None
        attributes = self._chat_base(request, llm)
        name = self._chat_name
        if self._capture:
            content = input_messages_json(request.messages)
            attributes = {**attributes, "gen_ai.input.messages": content}
        return self._tracer.start_span(name, kind=SpanKind.CLIENT, attributes=attributes)

    @staticmethod
    def chat_retry(span: Span | None, retry: TransportRetry) -> None:
        """Record a transport retry as a ``transport_retry`` span event."""
        if span is not None:
            span.add_event(
                "transport_retry",
                {
                    "error.type": retry.kind.value,
                    "subagent.retry.attempt": retry.attempt,
                    "subagent.retry.delay_s": retry.delay_s,
                    "exception.message": shorten(retry.message, ERROR_TEXT_LIMIT),
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
            attributes: dict[str, AttributeValue]
            if response is not None:
                usage = response.usage
                attributes = {
                    "gen_ai.response.finish_reasons": (response.stop_reason.value,),
                    "gen_ai.usage.input_tokens": usage.input_tokens,
                    "gen_ai.usage.output_tokens": usage.output_tokens,
                }
                if response.model:
                    attributes["gen_ai.response.model"] = response.model
                if self._capture:
                    attributes["gen_ai.output.messages"] = output_messages_json(response)
                span.set_attributes(attributes)
            elif error is not None or exc is not None:
                attributes = {}
                if error is not None:
                    _fail(span, attributes, error.kind.value, str(error))
                elif exc is not None:
                    _fail(span, attributes, *_exception_error(exc))
                span.set_attributes(attributes)
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
            attributes["gen_ai.tool.call.arguments"] = shorten(arguments, CONTENT_LIMIT)
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
            attributes: dict[str, AttributeValue] = {}
            if result is not None:
                if not result.ok:
                    _fail(span, attributes, result.error_type or "tool_error", result.content)
                if self._capture:
                    attributes["gen_ai.tool.call.result"] = shorten(result.content, CONTENT_LIMIT)
            elif exc is not None:
                _fail(span, attributes, *_exception_error(exc))
            if attributes:
                span.set_attributes(attributes)
        finally:
            span.end()
