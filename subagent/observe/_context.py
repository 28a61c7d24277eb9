"""Trace context across a pause: the W3C ``traceparent`` a saved run state carries.

A resumed run continues its original trace: the resumed part's ``invoke_agent`` span is a
child of the first part's (whose ``traceparent`` the :class:`~subagent.RunState` keeps), so
one run reads as one trace however many processes it went through. Costs nothing when the
run is not traced.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

__all__ = ["continuing_trace", "current_traceparent", "mark_resumed"]

_PROPAGATOR = TraceContextTextMapPropagator()


def current_traceparent() -> str | None:
    """The ``traceparent`` of the current span, or ``None`` when nothing is traced."""
    if not trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier.get("traceparent")


@contextmanager
def continuing_trace(traceparent: str | None) -> Iterator[None]:
    """Make the span ``traceparent`` names the parent of spans started in the block."""
    if traceparent is None:
        yield
        return
    token = otel_context.attach(_PROPAGATOR.extract({"traceparent": traceparent}))
    try:
        yield
    finally:
        otel_context.detach(token)


def mark_resumed() -> None:
    """Say on the current run span that it resumes a saved state (when it is recorded)."""
    span = trace.get_current_span()
    if span.is_recording():
        span.set_attribute("subagent.resumed", True)
