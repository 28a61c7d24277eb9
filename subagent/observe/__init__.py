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

# Used by observer_for_run below; the library's own modules import them from where they
# are defined, and they are not part of the room's names.
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
from subagent.observe._metrics import (
    METER_PROVIDER_FROM_ENV,
    metrics_observer,
)
from subagent.observe._observer import Observer, TextObserver, combine
from subagent.observe._otel import span_observer
from subagent.observe._stream import EventQueue, StreamObserver

__all__ = [
    "CallRetried",
    "EventHandler",
    "PartialOutput",
    "ReasoningDelta",
    "RunEnded",
    "RunEvent",
    "RunPaused",
    "RunStarted",
    "TextDelta",
    "ToolCallEnded",
    "ToolCallStarted",
    "TurnEnded",
    "TurnStarted",
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
