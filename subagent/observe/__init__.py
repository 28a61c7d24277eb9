"""The observation room: what a run reports, to whoever listens.

The turn loop reports to one :class:`Observer` through nested scopes (run > turn > chat /
tool); see :mod:`subagent.observe._observer`. Implementations:

- ``_otel``: OpenTelemetry spans (the API only; the library never installs a provider).
- ``_semconv``: which GenAI conventions the spans and metrics follow (chosen once, from
  ``OTEL_SEMCONV_STABILITY_OPT_IN``), and where captured content goes.
- ``_metrics``: OpenTelemetry metrics (GenAI conventions and subagent's own counters; the
  API only, recorded to the global meter provider once an application has set one).
- ``_events``: the typed events (``RunStarted``, ``TurnStarted``, ``TurnEnded``,
  ``RunEnded``) handed to ``run(on_event=...)``.
- ``_observer``: the interface, the silent :data:`NO_OBSERVER`, ``on_text``'s
  :class:`TextObserver`, and :func:`combine` for several at once.
- ``_context``: the W3C ``traceparent`` a saved run state carries, and continuing it.
- ``_stream``: :class:`StreamObserver`, every event into an :class:`EventQueue` for
  ``SubAgent.stream()``.
- ``_partial``: :class:`PartialOutputReader`, a typed output read from that stream's text
  as it arrives (``AgentRun.stream_output()``), in the consumer's task.

:func:`observer_for_run` picks a run's observers from its options.

What it may import: the records (``subagent.records``), the LLM room's records and the
base modules. The run loop reports into it; it never calls back into the loop.
"""

from __future__ import annotations

from collections.abc import Callable, Container

import opentelemetry.metrics._internal as _metrics_state
from opentelemetry.trace import TracerProvider

from subagent.observe._context import current_traceparent, links_to
from subagent.observe._events import (
    CallRetried,
    EventHandler,
    EventObserver,
    PartialOutput,
    ReasoningDelta,
    RunEnded,
    RunEvent,
    RunPaused,
    RunStarted,
    TextDelta,
    ToolCallEnded,
    ToolCallStarted,
    TurnEnded,
    TurnStarted,
)
from subagent.observe._metrics import METER_PROVIDER_FROM_ENV, MetricsObserver, metrics_observer
from subagent.observe._observer import (
    NO_OBSERVER,
    ChatScope,
    Observer,
    RunScope,
    TextObserver,
    ToolScope,
    TurnScope,
    TurnStart,
    check_callback,
    combine,
    refuse_awaitable,
)
from subagent.observe._otel import (
    CAPTURE_CONTENT_ENV,
    CONTENT_LIMIT,
    ERROR_TEXT_LIMIT,
    UNKNOWN_TOOL,
    SpanObserver,
    capture_enabled,
    span_observer,
)
from subagent.observe._partial import (
    PARSE_EVERY,
    PARSE_GROWTH,
    PRUNED_LEVELS,
    PartialOutputReader,
    partial_output_reader,
)
from subagent.observe._semconv import (
    CONVENTIONS_COMMIT,
    DETAILS_EVENT,
    LATEST_EXPERIMENTAL,
    STABILITY_OPT_IN_ENV,
    Capture,
    SemConv,
    active_semconv,
    capture_mode,
    refresh_semconv,
)
from subagent.observe._stream import DELTA_ROOM, EventQueue, StreamObserver

__all__ = [
    "CAPTURE_CONTENT_ENV",
    "CONTENT_LIMIT",
    "CONVENTIONS_COMMIT",
    "DELTA_ROOM",
    "DETAILS_EVENT",
    "ERROR_TEXT_LIMIT",
    "LATEST_EXPERIMENTAL",
    "NO_OBSERVER",
    "PARSE_EVERY",
    "PARSE_GROWTH",
    "PRUNED_LEVELS",
    "STABILITY_OPT_IN_ENV",
    "UNKNOWN_TOOL",
    "CallRetried",
    "Capture",
    "ChatScope",
    "EventHandler",
    "EventObserver",
    "EventQueue",
    "MetricsObserver",
    "Observer",
    "PartialOutput",
    "PartialOutputReader",
    "ReasoningDelta",
    "RunEnded",
    "RunEvent",
    "RunPaused",
    "RunScope",
    "RunStarted",
    "SemConv",
    "SpanObserver",
    "StreamObserver",
    "TextDelta",
    "TextObserver",
    "ToolCallEnded",
    "ToolCallStarted",
    "ToolScope",
    "TurnEnded",
    "TurnScope",
    "TurnStart",
    "TurnStarted",
    "active_semconv",
    "capture_enabled",
    "capture_mode",
    "check_callback",
    "combine",
    "current_traceparent",
    "links_to",
    "metrics_observer",
    "observer_for_run",
    "partial_output_reader",
    "refresh_semconv",
    "refuse_awaitable",
    "span_observer",
]


def observer_for_run(
    agent: str,
    llm: object,
    tracer_provider: TracerProvider | None,
    on_event: EventHandler | None,
    on_text: Callable[[str], object] | None,
    events: EventQueue | None = None,
    tool_names: Container[str] = (),
    nested: bool = False,
) -> Observer:
    """The observer of one run: its spans, its metrics, its callbacks, its event stream.

    With none of them, :data:`NO_OBSERVER`: the run pays nothing for observation.
    ``nested`` says whether the run is nested in another run in this process.
    """
    # Checked here, inline, rather than in metrics_observer: with no meter provider ever set
    # (the common case) a run then pays one attribute read for metrics, not a call.
    metered = _metrics_state._METER_PROVIDER is not None or METER_PROVIDER_FROM_ENV
    return combine(
        [
            EventObserver(agent, on_event) if on_event is not None else None,
            span_observer(agent, tracer_provider, llm, tool_names),
            metrics_observer(agent, llm, tool_names, nested=nested) if metered else None,
            TextObserver(on_text) if on_text is not None else None,
            StreamObserver(agent, events) if events is not None else None,
        ]
    )
