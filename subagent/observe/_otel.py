"""OpenTelemetry spans of a run: an :class:`~subagent.observe.Observer` on the API only.

The library never installs a tracer provider. A run traces to the provider it is given, or
to the global one once an application has configured it; with neither (the API's proxy or
no-op provider), :func:`span_observer` returns ``None`` and the run pays nothing for spans.

Spans (names are low-cardinality, attributes carry the detail):

- ``invoke_agent {agent}`` (INTERNAL): the run.
- ``agent_turn {type}`` (INTERNAL), a child of the run: one turn.
- ``chat {model}`` (CLIENT), a child of the turn: the LLM call, GenAI semantic conventions;
  transport retries are span events.
- ``execute_tool {tool}`` (INTERNAL), a child of the turn: one tool call. An agent used as a
  tool (``inner.as_tool()``) runs under it, so its run is a child of the tool span.

Each span is a scope of the observer: it is made current while its block runs (so children
nest under it, and an agent called as a tool traces under the tool's span), and it is ended
when the block is left, by cancellation too. Every hook is on the run's path, so each does
the least it can: one ``set_attributes`` call per span end, the chat span's per-run
attributes computed once, and message content serialised only when
:data:`CAPTURE_CONTENT_ENV` opts in.

Names follow the conventions :mod:`subagent.observe._semconv` chose at import (the previous
ones by default, the latest with ``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``).
With content capture on events, each LLM call also emits a
``gen_ai.client.inference.operation.details`` event (a log record, to the global logger
provider) carrying its messages in structured form, correlated with the ``chat`` span.
"""

from __future__ import annotations

import json
import os
import weakref
from collections.abc import Container, Sequence
from contextvars import Token
from types import TracebackType
from typing import Any

import anyio
from opentelemetry import _logs, trace
from opentelemetry import context as otel_context
from opentelemetry.context import Context
from opentelemetry.trace import ProxyTracerProvider, Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.util.types import AttributeValue

from subagent.__about__ import __version__
from subagent._errors import LLMError
from subagent._text import shorten
from subagent.llm import LLMRequest, LLMResponse, Message, ToolCall, TransportRetry
from subagent.observe._context import links_to
from subagent.observe._observer import (
    ChatScope,
    Observer,
    RunScope,
    ToolScope,
    TurnScope,
    TurnStart,
)
from subagent.observe._semconv import (
    CAPTURE_CONTENT_ENV,
    DETAILS_EVENT,
    SemConv,
    active_semconv,
    capture_mode,
)
from subagent.records import FailReason, Step, ToolResult, Turn, TurnOutcome

__all__ = [
    "CAPTURE_CONTENT_ENV",
    "CONTENT_LIMIT",
    "ERROR_TEXT_LIMIT",
    "UNKNOWN_PROVIDER",
    "UNKNOWN_TOOL",
    "SpanObserver",
    "capture_enabled",
    "span_observer",
]

UNKNOWN_TOOL = "unknown_tool"
"""The tool name traced for a call naming a tool the agent does not have (capture off)."""
ERROR_TEXT_LIMIT = 1_000
"""Characters kept of an error text (``subagent.turn.error``, status descriptions)."""
CONTENT_LIMIT = 16_384
"""Characters kept of one captured content attribute (valid JSON is kept valid)."""
UNKNOWN_PROVIDER = "unknown"
"""``gen_ai.provider.name`` (required on metrics and events) of a model that names none."""
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


# The API reads OTEL_PYTHON_TRACER_PROVIDER from the environment each time no global
# provider is set; a run asks on every start, so that case is read once, at import.
_PROVIDER_FROM_ENV = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ


def _global_provider() -> trace.TracerProvider | None:
    """The global tracer provider, or ``None`` when none is configured (cheaply)."""
    if not _PROVIDER_FROM_ENV and getattr(trace, "_TRACER_PROVIDER", False) is None:
        return None  # the API's own record: nothing set yet
    provider = trace.get_tracer_provider()
    if isinstance(provider, ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    return provider


def _tracer_for(provider: trace.TracerProvider | None) -> Tracer | None:
    """The library's tracer from ``provider`` (default: the global one), or ``None``."""
    if provider is None:
        provider = _global_provider()
        if provider is None:
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
    """Whether :data:`CAPTURE_CONTENT_ENV` opts in to recording message content on spans."""
    return capture_mode().on_spans


# The API reads OTEL_PYTHON_LOGGER_PROVIDER from the environment while no global logger
# provider is set; read once, at import, as for the tracer provider.
_LOGGER_PROVIDER_FROM_ENV = "OTEL_PYTHON_LOGGER_PROVIDER" in os.environ


def _details_logger() -> _logs.Logger | None:
    """The library's logger on the global logger provider, or ``None`` when none is set."""
    if not _LOGGER_PROVIDER_FROM_ENV and getattr(_logs._internal, "_LOGGER_PROVIDER", 0) is None:
        return None  # the API's own record: nothing set yet
    provider = _logs.get_logger_provider()
    if isinstance(provider, _logs.NoOpLoggerProvider | _logs._internal.ProxyLoggerProvider):
        return None
    return provider.get_logger(_TRACER_NAME, __version__)


def _is_cancellation(exc: BaseException | None) -> bool:
    return exc is not None and isinstance(exc, anyio.get_cancelled_exc_class())


def _cache_attributes(
    attributes: dict[str, Any], cache_read: int, cache_write: int, semconv: SemConv
) -> None:
    """The prompt-cache counts (part of the input tokens), when the provider reported any."""
    if cache_read:
        attributes["gen_ai.usage.cache_read.input_tokens"] = cache_read
    if cache_write:
        attributes[semconv.cache_write_tokens] = cache_write


def _fail(
    span: Span, attributes: dict[str, AttributeValue], error_type: str, description: str
) -> None:
    """Set ``error.type`` in ``attributes`` and the span's status to ERROR."""
    attributes["error.type"] = error_type
    span.set_status(Status(StatusCode.ERROR, shorten(description, ERROR_TEXT_LIMIT)))


def _exception_error(exc: BaseException, capture: bool) -> tuple[str, str]:
    """``(error.type, description)`` of an exception that ended a span early.

    Without content capture, the description is the exception's class only: its message
    may quote a reply or a tool.
    """
    if _is_cancellation(exc):
        return "cancelled", "cancelled before it completed"
    name = type(exc).__qualname__
    return name, f"{type(exc).__name__}: {exc}" if capture else name


def _failure_description(step: Step[Any], capture: bool) -> str:
    """Why a run failed, for its span: without content capture, no text of a reply."""
    failure = step.failure
    assert failure is not None
    if capture:
        return failure.message
    reason = failure.reason
    if reason is FailReason.BUDGET_EXHAUSTED:
        # The message is the runtime's "no valid answer within ...; last error: <text>".
        within = failure.message.partition("; last error: ")[0]
        last = step.turns[-1].error_summary if step.turns else None
        return f"{within}; last error: {last}" if last else within
    if reason is FailReason.LLM_ERROR and failure.error_kind is not None:
        return f"llm_error: {failure.error_kind.value}"
    if reason in (FailReason.TIMEOUT, FailReason.CANCELLED, FailReason.TOOL_SERVER_LOST):
        return failure.message  # the runtime's own words (a limit, a stop, a lost server)
    return reason.value  # an explicit fail's reason is the model's text


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


def _kept(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str]:
    """The messages that fit :data:`CONTENT_LIMIT` characters of JSON, and that JSON.

    Over the limit, the oldest messages after the first (the system prompt) are left out;
    each message is serialised once. The JSON is cut (no longer valid) only when the
    first and the last message alone are over the limit.
    """
    encoded = [json.dumps(m, ensure_ascii=False, default=str) for m in messages]
    size = sum(len(item) for item in encoded) + len(encoded) + 1  # brackets and commas
    first_kept = 1
    while size > CONTENT_LIMIT and len(encoded) - first_kept > 1:
        size -= len(encoded[first_kept]) + 1
        first_kept += 1
    text = "[" + ",".join(encoded[:1] + encoded[first_kept:]) + "]"
    kept = messages[:1] + messages[first_kept:]
    return kept, text if len(text) <= CONTENT_LIMIT else shorten(text, CONTENT_LIMIT)


def _content_json(messages: list[dict[str, Any]]) -> str:
    """Messages as semconv JSON, at most :data:`CONTENT_LIMIT` characters, valid JSON."""
    return _kept(messages)[1]


def _input_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    return [{"role": m.role, "parts": _parts(m)} for m in messages]


def _output_messages(response: LLMResponse, finish_reason: bool) -> list[dict[str, Any]]:
    message = Message.model_construct(role="assistant", content=response.text,
                                      tool_calls=tuple(response.tool_calls))  # fmt: skip
    parts = _parts(message)
    if response.reasoning:  # sent apart from the text (reasoning_content)
        parts.insert(0, {"type": "reasoning", "content": shorten(response.reasoning, _PART_LIMIT)})
    reply: dict[str, Any] = {"role": "assistant", "parts": parts}
    if finish_reason:  # deprecated by the latest conventions: gen_ai.response.finish_reasons
        reply["finish_reason"] = response.stop_reason.value
    return [reply]


def input_messages_json(messages: Sequence[Message]) -> str:
    """The request's messages in the GenAI semconv shape (``role`` + ``parts``)."""
    return _content_json(_input_messages(messages))


def output_messages_json(response: LLMResponse, finish_reason: bool = True) -> str:
    """The reply in the GenAI semconv shape, with its finish reason unless told not to."""
    return _content_json(_output_messages(response, finish_reason))


# --- spans as observer scopes ---


class _SpanScope:
    """A span made current for a ``with`` block, and ended when the block is left.

    Subclasses describe the span from what the loop reports (``_described`` is set then);
    a block left by an exception before that is described by :meth:`_interrupted`.
    """

    __slots__ = ("_capture", "_described", "_span", "_token")
    _token: Token[Context]

    def __init__(self, span: Span, capture: bool):
        self._span = span
        self._capture = capture
        self._described = False

    def __enter__(self) -> Any:
        self._token = otel_context.attach(trace.set_span_in_context(self._span))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        otel_context.detach(self._token)
        span = self._span
        try:
            if exc is not None and not self._described:
                self._interrupted(span, exc)
        finally:
            span.end()

    def _interrupted(self, span: Span, exc: BaseException) -> None:
        attributes: dict[str, AttributeValue] = {}
        _fail(span, attributes, *_exception_error(exc, self._capture))
        span.set_attributes(attributes)


class _RunSpan(_SpanScope):
    __slots__ = ("_semconv",)

    def __init__(self, span: Span, capture: bool, semconv: SemConv):
        super().__init__(span, capture)
        self._semconv = semconv

    def finished(self, step: Step[Any]) -> None:
        self._described = True
        # Summed here rather than read from ``step.usage``, which may build pydantic models.
        input_tokens = output_tokens = unreported = cache_read = cache_write = 0
        for turn in step.turns:
            usage = turn.usage
            input_tokens += usage.input_tokens
            output_tokens += usage.output_tokens
            unreported += usage.unreported
            cache_read += usage.cache_read_tokens
            cache_write += usage.cache_write_tokens
        failure = step.failure
        paused = step.state is not None
        attributes: dict[str, AttributeValue] = {
            "subagent.outcome": "failed" if failure is not None else "paused" if paused else "done",
            "subagent.turns": len(step.turns),
            "gen_ai.usage.input_tokens": input_tokens,
            "gen_ai.usage.output_tokens": output_tokens,
        }
        if unreported:  # the sums are a lower bound
            attributes["subagent.usage.unreported_calls"] = unreported
        if self._semconv.run_cache_tokens:  # the latest conventions: on chat spans only
            _cache_attributes(attributes, cache_read, cache_write, self._semconv)
        if paused:
            pending = step.pending
            attributes["subagent.paused"] = True
            attributes["subagent.pending_calls"] = len(pending.needs_approval) if pending else 0
        span = self._span
        if failure is not None:
            reason = failure.reason.value
            attributes["subagent.failure.reason"] = reason
            _fail(span, attributes, reason, _failure_description(step, self._capture))
        span.set_attributes(attributes)

    def _interrupted(self, span: Span, exc: BaseException) -> None:
        error_type, description = _exception_error(exc, self._capture)
        attributes: dict[str, AttributeValue] = {
            "subagent.outcome": "failed",
            "subagent.failure.reason": "cancelled" if _is_cancellation(exc) else "error",
        }
        _fail(span, attributes, error_type, description)
        span.set_attributes(attributes)


class _TurnSpan(_SpanScope):
    __slots__ = ("_budget",)

    def __init__(self, span: Span, capture: bool, budget: tuple[int, int]):
        super().__init__(span, capture)
        self._budget = budget  # (work, retries) left if the turn is cut short

    def ended(self, turn: Turn) -> None:
        self._described = True
        outcome = turn.outcome
        attributes: dict[str, AttributeValue] = {
            "subagent.turn.outcome": outcome.value,
            "subagent.phase.after": turn.phase_after,
            "subagent.budget.work_remaining": turn.work_remaining,
            "subagent.budget.retries_remaining": turn.retries_remaining,
        }
        if turn.stop_reason is not None:
            attributes["gen_ai.response.finish_reasons"] = (turn.stop_reason.value,)
        if turn.corrected:
            attributes["subagent.turn.corrected"] = True
        if turn.output_mode is not None:
            attributes["subagent.turn.output_mode"] = turn.output_mode
        if turn.repeated:
            attributes["subagent.turn.repeated"] = True
        error = turn.error if self._capture else turn.error_summary
        if error is not None:
            attributes["subagent.turn.error"] = shorten(error, ERROR_TEXT_LIMIT)
        span = self._span
        if outcome in _ERROR_OUTCOMES:
            _fail(span, attributes, turn.error_type or outcome.value, error or outcome.value)
        span.set_attributes(attributes)

    def _interrupted(self, span: Span, exc: BaseException) -> None:
        error, description = _exception_error(exc, self._capture)
        work, retries = self._budget
        attributes: dict[str, AttributeValue] = {
            "subagent.turn.error": description,
            "subagent.budget.work_remaining": work,
            "subagent.budget.retries_remaining": retries,
        }
        _fail(span, attributes, error, description)
        span.set_attributes(attributes)


class _ChatSpan(_SpanScope):
    """The ``chat`` span; with content capture on events, the call's details event too.

    ``details`` is the event's attributes known when the call starts (the request's, its
    messages included), or ``None`` when no event is emitted.
    """

    __slots__ = ("_details", "_logger", "_semconv")

    def __init__(
        self,
        span: Span,
        capture: bool,
        semconv: SemConv,
        details: dict[str, Any] | None = None,
        logger: _logs.Logger | None = None,
    ):
        super().__init__(span, capture)
        self._semconv = semconv
        self._details = details
        self._logger = logger

    def _emit_details(self, attributes: dict[str, Any]) -> None:
        """Emit the call's details event, in the chat span's context."""
        assert self._details is not None and self._logger is not None
        self._logger.emit(
            event_name=DETAILS_EVENT,
            attributes={**self._details, **attributes},
            context=trace.set_span_in_context(self._span),
        )

    def retried(self, retry: TransportRetry) -> None:
        event: dict[str, AttributeValue] = {
            "error.type": retry.kind.value,
            "subagent.retry.attempt": retry.attempt,
            "subagent.retry.delay_s": retry.delay_s,
        }
        if retry.model is not None:  # a FallbackLLM's model: which failed, which is next
            event["subagent.retry.model"] = retry.model
            if retry.fallback_to is not None:
                event["subagent.retry.fallback_to"] = retry.fallback_to
        if self._capture:  # a server's message may quote the request
            event["exception.message"] = shorten(retry.message, ERROR_TEXT_LIMIT)
        self._span.add_event("transport_retry", event)

    def text(self, piece: str) -> None:
        return None

    def reasoning(self, piece: str) -> None:
        return None

    def replied(self, response: LLMResponse) -> None:
        self._described = True
        usage = response.usage
        attributes: dict[str, AttributeValue] = {
            "gen_ai.response.finish_reasons": (response.stop_reason.value,),
        }
        semconv = self._semconv
        if usage.known:  # an unreported count is absent, not zero
            attributes["gen_ai.usage.input_tokens"] = usage.input_tokens
            attributes["gen_ai.usage.output_tokens"] = usage.output_tokens
            _cache_attributes(
                attributes, usage.cache_read_tokens, usage.cache_write_tokens, semconv
            )
        else:
            attributes["subagent.usage.unreported_calls"] = usage.unreported
        if response.model:
            attributes["gen_ai.response.model"] = response.model
        if self._capture or self._details is not None:
            output = _output_messages(response, semconv.message_finish_reason)
            if self._capture:
                attributes["gen_ai.output.messages"] = _content_json(output)
            if self._details is not None:
                event: dict[str, Any] = {**attributes, "gen_ai.output.messages": output}
                event.pop("subagent.usage.unreported_calls", None)
                self._emit_details(event)
        self._span.set_attributes(attributes)

    def _interrupted(self, span: Span, exc: BaseException) -> None:
        attributes: dict[str, AttributeValue] = {}
        if isinstance(exc, LLMError):
            status = f" (HTTP {exc.status_code})" if exc.status_code is not None else ""
            description = str(exc) if self._capture else f"{exc.kind.value}{status}"
            _fail(span, attributes, exc.kind.value, description)
        else:
            _fail(span, attributes, *_exception_error(exc, self._capture))
        span.set_attributes(attributes)
        if self._details is not None:  # the messages sent; no output to report
            self._emit_details({"error.type": attributes["error.type"]})


class _ToolSpan(_SpanScope):
    __slots__ = ()

    def returned(self, result: ToolResult) -> None:
        self._described = True
        attributes: dict[str, AttributeValue] = {}
        if result.pruned_arguments:
            attributes["subagent.tool.pruned_count"] = len(result.pruned_arguments)
            if self._capture:  # names the model made up
                attributes["subagent.tool.pruned_arguments"] = tuple(result.pruned_arguments)
        if not result.ok:
            error_type = result.error_type or "tool_error"
            description = result.content if self._capture else error_type
            _fail(self._span, attributes, error_type, description)
        if self._capture:
            attributes["gen_ai.tool.call.result"] = shorten(result.content, CONTENT_LIMIT)
        if attributes:
            self._span.set_attributes(attributes)


class SpanObserver(Observer):
    """Spans of one run: ``invoke_agent`` > ``agent_turn`` > ``chat`` / ``execute_tool``.

    Build it with :func:`span_observer`, which returns ``None`` when there is no tracer.
    """

    __slots__ = (
        "_agent", "_capture", "_chats", "_llm", "_logger", "_semconv", "_tool_names", "_tracer",
    )  # fmt: skip

    def __init__(self, agent: str, tracer: Tracer, llm: object, tool_names: Container[str] = ()):
        self._agent = agent
        self._tracer = tracer
        self._llm = llm
        self._tool_names = tool_names
        mode = capture_mode()
        self._capture = mode.on_spans
        # Details events only with capture on events and a logger provider to take them.
        self._logger = _details_logger() if mode.on_events else None
        self._semconv = active_semconv()  # chosen once, at import: no per-span look-up
        # The chat span's name and attributes, by (model, settings): a run's work turns share
        # one pair, its correction turns may have their own (another model, temperature).
        self._chats: dict[tuple[int, int], tuple[str, dict[str, AttributeValue]]] = {}

    def run(
        self,
        max_turns: int,
        return_retries: int,
        phase: str,
        resumed: bool = False,
        first_part: str | None = None,
    ) -> RunScope:
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": self._agent,
            "subagent.max_turns": max_turns,
            "subagent.return_retries": return_retries,
        }
        provider = getattr(self._llm, "provider_name", None)
        if provider and self._semconv.run_provider:  # the latest: on chat spans only
            attributes["gen_ai.provider.name"] = str(provider)
        if resumed:
            attributes["subagent.resumed"] = True
        links = links_to(first_part)
        span = self._tracer.start_span(
            f"invoke_agent {self._agent}", kind=SpanKind.INTERNAL, attributes=attributes,
            links=links,
        )  # fmt: skip
        return _RunSpan(span, self._capture, self._semconv)

    def turn(self, start: TurnStart) -> TurnScope:
        type_name = start.type.value
        attributes: dict[str, AttributeValue] = {
            "subagent.turn.index": start.index,
            "subagent.turn.type": type_name,
            "subagent.phase.before": type_name,
            "subagent.turn.tools_offered": start.tools_offered,
            "subagent.context.messages": start.messages,
            "subagent.context.collapsed": start.collapsed,
        }
        if start.attempt is not None and start.total is not None:
            attributes["subagent.retry.attempt"] = start.attempt
            attributes["subagent.retry.total"] = start.total
        span = self._tracer.start_span(
            f"agent_turn {type_name}", kind=SpanKind.INTERNAL, attributes=attributes
        )
        # What is left if the turn is cut short: the turn counts, as on the Turn record.
        return _TurnSpan(span, self._capture, start.left_if_cut_short)

    def _chat_base(self, request: LLMRequest, llm: object) -> tuple[str, dict[str, AttributeValue]]:
        """The chat span's name, and the attributes of the run's calls of ``llm``.

        Worked out once per model and settings (a correction's may differ).
        """
        key = (id(llm), id(request.settings))
        known = self._chats.get(key)
        if known is not None:
            return known
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
        for key_name, name in _SETTINGS:
            value = request.settings.get(key_name)
            if isinstance(value, int | float) and not isinstance(value, bool):
                attributes[name] = value
        known = (f"chat {model}", attributes)
        if len(self._chats) < 8:
            self._chats[key] = known
        return known

    def chat(self, request: LLMRequest, llm: object = None) -> ChatScope:
        name, attributes = self._chat_base(request, self._llm if llm is None else llm)
        if request.output is not None and request.output.mode != "text":
            attributes = {**attributes, "subagent.request.output_mode": request.output.mode}
        details: dict[str, Any] | None = None
        if self._capture or self._logger is not None:
            sent, content = _kept(_input_messages(request.messages))
            if self._logger is not None:  # structured, as events require
                provider = attributes.get("gen_ai.provider.name", UNKNOWN_PROVIDER)
                details = {**attributes, "gen_ai.provider.name": provider,
                           "gen_ai.input.messages": sent}  # fmt: skip
            if self._capture:
                attributes = {**attributes, "gen_ai.input.messages": content}
        span = self._tracer.start_span(name, kind=SpanKind.CLIENT, attributes=attributes)
        return _ChatSpan(span, self._capture, self._semconv, details, self._logger)

    def tool(self, call: ToolCall) -> ToolScope:
        # A name the agent does not offer is the model's text: it goes on the span only
        # with content capture, and never into the span's name (kept low-cardinality).
        known = call.name in self._tool_names
        name = call.name if known else UNKNOWN_TOOL
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.name if known or self._capture else name,
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
        span = self._tracer.start_span(
            f"execute_tool {name}", kind=SpanKind.INTERNAL, attributes=attributes
        )
        return _ToolSpan(span, self._capture)


def span_observer(
    agent: str,
    tracer_provider: trace.TracerProvider | None,
    llm: object,
    tool_names: Container[str] = (),
) -> SpanObserver | None:
    """The run's span observer, or ``None`` when no tracer provider is configured.

    Args:
        agent: The agent's name (``invoke_agent {agent}``).
        tracer_provider: The provider to trace to; ``None`` for the global one.
        llm: The model client, read for its model, provider and server attributes.
        tool_names: The agent's tools. A call naming any other tool traces as
            :data:`UNKNOWN_TOOL` unless content capture is on.
    """
    tracer = _tracer_for(tracer_provider)
    return None if tracer is None else SpanObserver(agent, tracer, llm, tool_names)
