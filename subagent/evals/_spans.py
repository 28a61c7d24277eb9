"""The spans of one case run, captured for the judges that read them (span judges).

When a dataset has a judge that reads spans (``Judge.reads_spans``, as
:class:`~subagent.evals.HasMatchingSpan` does), each agent run is given a
:class:`SpanRecorder` as its ``tracer_provider``: a tracer provider of the OpenTelemetry API
(no SDK needed) that keeps what the run's spans say (names, attributes, events, parents,
errors) for that one run, and passes every span on to the provider the run would have
traced to otherwise (the evaluation's ``tracer_provider``, else the global one, when one is
configured), so the evaluation's traces are the same with or without it. Nested agents
inherit their parent's provider, so their spans are captured too.

Without such a judge nothing is made: a run is given the options it would have been given.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)
from opentelemetry.util.types import AttributeValue

__all__ = ["MAX_SPANS", "CapturedSpan", "SpanRecorder"]

MAX_SPANS: Final = 2_000
"""Spans kept of one case run; the ones after them are passed on but not kept."""


@dataclass(frozen=True, slots=True)
class CapturedSpan:
    """One span of a case's run, as a span judge sees it.

    Attributes:
        name: The span's name (``invoke_agent adder``, ``agent_turn normal``,
            ``chat gpt-4o-mini``, ``execute_tool lookup``...).
        attributes: Its attributes as the run left them (``gen_ai.tool.name``,
            ``subagent.turn.type``...).
        parent: The index of its parent among the run's spans; ``None`` for the run's own
            root (``invoke_agent``).
        events: The names of its events, in order.
        error: Whether its status is an error.
        duration_s: Its wall time; ``None`` when it had not ended when the run did.
    """

    name: str
    attributes: Mapping[str, Any]
    parent: int | None = None
    events: tuple[str, ...] = ()
    error: bool = False
    duration_s: float | None = None


class _RecordingSpan(Span):
    """A span that keeps what it is told, and tells it to the span it wraps, if any."""

    def __init__(
        self,
        name: str,
        attributes: Mapping[str, AttributeValue] | None,
        parent: int | None,
        inner: Span | None,
    ):
        self.name = name
        self.attributes: dict[str, Any] = dict(attributes or {})
        self.parent = parent
        self.inner = inner
        self.events: list[str] = []
        self.error = False
        self.started = time.perf_counter()
        self.ended: float | None = None
        self.index = -1
        if inner is not None:
            self._context = inner.get_span_context()
        else:  # traced nowhere else: ids of its own, so the context holds a valid span
            self._context = SpanContext(
                trace_id=random.getrandbits(128) or 1,
                span_id=random.getrandbits(64) or 1,
                is_remote=False,
                trace_flags=TraceFlags(TraceFlags.SAMPLED),
            )

    def end(self, end_time: int | None = None) -> None:
        if self.ended is None:
            self.ended = time.perf_counter()
        if self.inner is not None:
            self.inner.end(end_time)

    def get_span_context(self) -> SpanContext:
        return self._context

    def set_attributes(self, attributes: Mapping[str, AttributeValue]) -> None:
        self.attributes.update(attributes)
        if self.inner is not None:
            self.inner.set_attributes(attributes)

    def set_attribute(self, key: str, value: AttributeValue) -> None:
        self.attributes[key] = value
        if self.inner is not None:
            self.inner.set_attribute(key, value)

    def add_event(
        self,
        name: str,
        attributes: Mapping[str, AttributeValue] | None = None,
        timestamp: int | None = None,
    ) -> None:
        self.events.append(name)
        if self.inner is not None:
            self.inner.add_event(name, attributes, timestamp)

    def add_link(
        self, context: SpanContext, attributes: Mapping[str, AttributeValue] | None = None
    ) -> None:
        if self.inner is not None:
            self.inner.add_link(context, attributes)

    def update_name(self, name: str) -> None:
        self.name = name
        if self.inner is not None:
            self.inner.update_name(name)

    def is_recording(self) -> bool:
        return True

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        code = status.status_code if isinstance(status, Status) else status
        self.error = code is StatusCode.ERROR
        if self.inner is not None:
            self.inner.set_status(status, description)

    def record_exception(
        self,
        exception: BaseException,
        attributes: Mapping[str, AttributeValue] | None = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        self.events.append("exception")
        if self.inner is not None:
            self.inner.record_exception(exception, attributes, timestamp, escaped)

    def captured(self) -> CapturedSpan:
        ended = None if self.ended is None else self.ended - self.started
        return CapturedSpan(self.name, dict(self.attributes), self.parent, tuple(self.events),
                            self.error, ended)  # fmt: skip


class _RecordingTracer(trace.Tracer):
    def __init__(self, recorder: SpanRecorder, inner: trace.Tracer | None):
        self._recorder = recorder
        self._inner = inner

    def start_span(
        self,
        name: str,
        context: otel_context.Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Mapping[str, AttributeValue] | None = None,
        links: Sequence[Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> Span:
        parent = trace.get_current_span(context)
        ours = isinstance(parent, _RecordingSpan)
        inner = None
        if self._inner is not None:
            if ours:  # the wrapped span is the parent where the spans are passed on
                assert isinstance(parent, _RecordingSpan)
                wrapped = parent.inner or NonRecordingSpan(parent.get_span_context())
                context = trace.set_span_in_context(wrapped, context)
            inner = self._inner.start_span(name, context, kind, attributes, links, start_time,
                                           record_exception, set_status_on_exception)  # fmt: skip
        index = parent.index if isinstance(parent, _RecordingSpan) else -1
        span = _RecordingSpan(name, attributes, None if index < 0 else index, inner)
        self._recorder._keep(span)
        return span

    @contextlib.contextmanager
    def start_as_current_span(  # type: ignore[override]  # the API's own decorator is private
        self,
        name: str,
        context: otel_context.Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Mapping[str, AttributeValue] | None = None,
        links: Sequence[Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> Iterator[Span]:
        span = self.start_span(name, context, kind, attributes, links, start_time,
                               record_exception, set_status_on_exception)  # fmt: skip
        with trace.use_span(
            span,
            end_on_exit=end_on_exit,
            record_exception=record_exception,
            set_status_on_exception=set_status_on_exception,
        ) as current:
            yield current


class SpanRecorder(trace.TracerProvider):
    """The tracer provider of one case run: keeps its spans, passes them on to ``inner``.

    Args:
        inner: The provider the run would have traced to (``None``: none configured).
    """

    def __init__(self, inner: trace.TracerProvider | None = None):
        self._inner = inner
        self._spans: list[_RecordingSpan] = []
        self.dropped = 0
        """Spans past :data:`MAX_SPANS`, not kept."""

    def get_tracer(
        self,
        instrumenting_module_name: str,
        instrumenting_library_version: str | None = None,
        schema_url: str | None = None,
        attributes: Any = None,
    ) -> trace.Tracer:
        """A tracer whose spans this recorder keeps."""
        inner = None
        if self._inner is not None:
            inner = self._inner.get_tracer(instrumenting_module_name,
                                           instrumenting_library_version, schema_url,
                                           attributes)  # fmt: skip
        return _RecordingTracer(self, inner)

    def _keep(self, span: _RecordingSpan) -> None:
        if len(self._spans) >= MAX_SPANS:
            self.dropped += 1
            return
        span.index = len(self._spans)
        self._spans.append(span)

    def spans(self) -> tuple[CapturedSpan, ...]:
        """The spans kept, in the order they started (a parent before its children)."""
        return tuple(span.captured() for span in self._spans)
