"""Trace context across a pause: the W3C ``traceparent`` a saved run state carries.

Each part of a run that paused and was resumed is a trace of its own, whose root says how
that part ended (a trace list shows a finished run as finished); the resumed part's
``invoke_agent`` span links to the first part's (whose ``traceparent`` the
:class:`~subagent.RunState` keeps). Costs nothing when the run is not traced.
"""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

__all__ = ["current_traceparent", "links_to"]

_PROPAGATOR = TraceContextTextMapPropagator()


def current_traceparent() -> str | None:
    """The ``traceparent`` of the current span, or ``None`` when nothing is traced."""
    if not trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier.get("traceparent")


def links_to(traceparent: str | None) -> list[trace.Link] | None:
    """A link to the span ``traceparent`` names (``None`` when there is none, or no valid one)."""
    if traceparent is None:
        return None
    span = trace.get_current_span(_PROPAGATOR.extract({"traceparent": traceparent}))
    context = span.get_span_context()
    return [trace.Link(context)] if context.is_valid else None
