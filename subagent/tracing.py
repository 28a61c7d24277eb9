"""Exporting a run's spans and metrics, for applications: :func:`configure`, the console summary.

The library itself only uses the OpenTelemetry API (see :mod:`subagent.observe._otel` and
:mod:`subagent.observe._metrics`); this module is the one place that builds an SDK
``TracerProvider`` and ``MeterProvider``, and only when the application calls
:func:`configure`. It needs the ``otlp`` extra::

    pip install 'subagent-runtime[otlp]'

Typical use::

    from subagent import tracing

    tracing.configure(service_name="calc-app")  # OTLP if OTEL_EXPORTER_OTLP_* is set,
    step = await agent.run(...)                 # else one console line per turn

Spans go to an OTLP receiver (Jaeger, an OpenTelemetry Collector, Phoenix...) chosen by the
standard variables, through a ``BatchSpanProcessor``: export happens on a background thread,
so a slow or unreachable receiver never fails or slows a run. Shutting down (explicitly, or
at interpreter exit) flushes what is left for at most ``shutdown_timeout`` seconds
(:data:`DEFAULT_SHUTDOWN_TIMEOUT`), however large the backlog; spans not exported by then
are dropped.

Metrics go to the same receiver (``OTEL_EXPORTER_OTLP_METRICS_*`` override it) through a
``PeriodicExportingMetricReader`` (every ``OTEL_METRIC_EXPORT_INTERVAL`` ms, 60 s by
default, on its own thread); the shutdown collects and exports them a last time within the
same ``shutdown_timeout``. ``OTEL_METRICS_EXPORTER=none`` (or ``configure(metrics=False)``)
leaves metrics off; ``console`` prints them on ``stream`` instead. A receiver that takes
traces only (Phoenix, Jaeger) refuses metrics over OTLP/HTTP (404, 405 or 501): the first
refusal stops the metrics export, with one warning that says how to turn metrics off or
where to send them, instead of an error line at every export.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, TextIO

import opentelemetry.metrics._internal as _metrics_state
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.metrics import set_meter_provider
from opentelemetry.util.types import AttributeValue

try:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import (
        ConsoleMetricExporter,
        MetricExporter,
        MetricExportResult,
        MetricReader,
        MetricsData,
        PeriodicExportingMetricReader,
    )
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace import Span as SdkSpan
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
except ImportError as exc:  # pragma: no cover - exercised in a test with the SDK hidden
    raise ImportError(
        "subagent.tracing needs the OpenTelemetry SDK and OTLP exporter, which come with the "
        "`otlp` extra: pip install 'subagent-runtime[otlp]'"
    ) from exc

from subagent._checks import check_seconds
from subagent.observe._semconv import refresh_semconv

__all__ = [
    "PROJECT_NAME_ATTRIBUTE",
    "ConsoleSummary",
    "OTLPTarget",
    "Tracing",
    "configure",
    "otlp_target",
    "refresh_semconv",
]

PROJECT_NAME_ATTRIBUTE = "openinference.project.name"
"""Resource attribute that Arize Phoenix uses to pick a project (others ignore it)."""

DEFAULT_SHUTDOWN_TIMEOUT: Final = 10.0
"""Seconds :meth:`Tracing.shutdown` (and so interpreter exit) spends flushing, at most."""

_logger = logging.getLogger(__name__)

_PROTOCOLS = ("grpc", "http/protobuf")
_DEFAULT_PROTOCOL = "http/protobuf"
_PROTOCOL_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
_METRICS_PROTOCOL_VARIABLES = (
    "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
)
_METRICS_EXPORTER_VARIABLE = "OTEL_METRICS_EXPORTER"
_METRICS_EXPORTERS = ("otlp", "console", "none")
_MISSING_EXPORTER = (
    "the OTLP {protocol} exporter is not installed ({error}); it comes with the `otlp` "
    "extra: pip install 'subagent-runtime[otlp]'"
)


# --- console summary ---


def _milliseconds(span: ReadableSpan) -> str:
    if span.start_time is None or span.end_time is None:
        return "?ms"
    ms = (span.end_time - span.start_time) / 1e6
    return f"{ms:.0f}ms" if ms >= 10 else f"{ms:.1f}ms"


def summary_line(span: ReadableSpan, agent: str | None = None, depth: int = 0) -> str | None:
    """The console line of a finished turn or run span, or ``None`` for other spans.

    A turn: ``calc  turn 2 must_return  error  invalid_output  work=0 retries=1  12ms``.
    A run: ``calc  done  3 turns  tokens in=120 out=45  20ms``.

    Args:
        span: A finished span.
        agent: The agent's name for a turn span (its run span carries it).
        depth: How deep the run is nested in other agents' tool calls (indents the line).
    """
    attributes = span.attributes or {}
    indent = "  " * depth
    name = span.name
    if name.startswith("agent_turn "):
        fields = [
            f"{indent}{agent or '?'}",
            f"turn {attributes.get('subagent.turn.index', '?')} "
            f"{attributes.get('subagent.turn.type', '?')}",
            str(attributes.get("subagent.turn.outcome", "interrupted")),
        ]
        if "error.type" in attributes:
            fields.append(str(attributes["error.type"]))
        fields.append(
            f"work={attributes.get('subagent.budget.work_remaining', '?')} "
            f"retries={attributes.get('subagent.budget.retries_remaining', '?')}"
        )
        fields.append(_milliseconds(span))
        return "  ".join(fields)
    if name.startswith("invoke_agent "):
        outcome = str(attributes.get("subagent.outcome", "?"))
        if outcome != "done":
            outcome = f"{outcome} {attributes.get('subagent.failure.reason', '?')}"
        turns = attributes.get("subagent.turns", "?")
        fields = [
            f"{indent}{attributes.get('gen_ai.agent.name', name.removeprefix('invoke_agent '))}",
            outcome,
            f"{turns} turn{'' if turns == 1 else 's'}",
            f"tokens in={attributes.get('gen_ai.usage.input_tokens', 0)} "
            f"out={attributes.get('gen_ai.usage.output_tokens', 0)}",
            _milliseconds(span),
        ]
        return "  ".join(fields)
    return None


class ConsoleSummary(SpanProcessor):
    """Print one compact line per finished turn and per finished run.

    The fallback of :func:`configure` when no OTLP endpoint is set, instead of the SDK's
    JSON dump. It writes on the run's path, so it never raises: a failed write is dropped.

    Args:
        stream: Where lines go (default: ``sys.stderr`` at the time of writing).
    """

    def __init__(self, stream: TextIO | None = None):
        self._stream = stream
        self._lock = threading.Lock()
        # Open spans: span id -> (agent name, nesting depth). Children start while their
        # parent is open, so a turn finds its run's name through its parent.
        self._open: dict[int, tuple[str | None, int]] = {}

    def on_start(self, span: SdkSpan, parent_context: Context | None = None) -> None:
        """Remember which agent (and how deep) the span belongs to."""
        parent = span.parent
        agent, depth = (None, -1)
        if parent is not None:
            agent, depth = self._open.get(parent.span_id, (None, -1))
        if span.name.startswith("invoke_agent "):
            attributes = span.attributes or {}
            agent = str(attributes.get("gen_ai.agent.name", span.name[13:]))
            depth += 1
        with self._lock:
            self._open[span.context.span_id] = (agent, depth)

    def on_end(self, span: ReadableSpan) -> None:
        """Print the line of a finished turn or run."""
        context = span.context
        with self._lock:
            agent, depth = self._open.pop(context.span_id, (None, 0)) if context else (None, 0)
        try:
            line = summary_line(span, agent, max(depth, 0))
            if line is not None:
                stream = self._stream or sys.stderr
                stream.write(line + "\n")
                stream.flush()
        except Exception:  # a console line must never break a run
            return

    def shutdown(self) -> None:
        """Forget open spans."""
        with self._lock:
            self._open.clear()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Nothing is buffered."""
        return True


# --- configure ---


def _first_env(names: tuple[str, ...]) -> tuple[str, str] | None:
    for name in names:
        value = os.environ.get(name, "").strip()
        if value:
            return name, value
    return None


def _resolve_protocol(
    protocol: str | None, variables: tuple[str, ...] = _PROTOCOL_VARIABLES
) -> str:
    source = "protocol"
    if protocol is None:
        found = _first_env(variables)
        if found is None:
            return _DEFAULT_PROTOCOL
        source, protocol = found
    value = protocol.strip().lower()
    if value not in _PROTOCOLS:
        raise ValueError(
            f"{source}: unsupported OTLP protocol {protocol!r}; use one of {', '.join(_PROTOCOLS)}"
        )
    return value


def _resolve_endpoint(
    endpoint: str | None, protocol: str, signal: str = "traces"
) -> tuple[str | None, str | None]:
    """``(url the exporter sends to, the value to pass it)``; ``(None, None)``: no endpoint.

    ``endpoint`` is a base URL, like ``OTEL_EXPORTER_OTLP_ENDPOINT``: for OTLP/HTTP the
    ``/v1/{signal}`` path is appended. Without it the exporter reads the variables itself.
    """
    if endpoint:
        base = endpoint.strip().rstrip("/")
        url = base if protocol == "grpc" else f"{base}/v1/{signal}"
        return url, url
    own = os.environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT", "").strip()
    if own:
        return own, None
    base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip().rstrip("/")
    if base:
        return (base if protocol == "grpc" else f"{base}/v1/{signal}"), None
    return None, None


def _otlp_exporter(protocol: str, endpoint: str | None) -> SpanExporter:
    try:
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter as GrpcExporter,
            )

            return GrpcExporter(endpoint=endpoint)
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HttpExporter,
        )

        return HttpExporter(endpoint=endpoint)
    except ImportError as exc:
        raise ImportError(_MISSING_EXPORTER.format(protocol=protocol, error=exc)) from exc


@dataclass(frozen=True, slots=True)
class OTLPTarget:
    """Where a run's spans go over OTLP, and the exporter that sends them there.

    Attributes:
        url: The URL the exporter sends to (``.../v1/traces`` for OTLP/HTTP); it may hold
            credentials, so show it without them.
        protocol: ``http/protobuf`` or ``grpc``.
        exporter: An OTLP span exporter for it, not yet used; its owner shuts it down.
    """

    url: str
    protocol: str
    exporter: SpanExporter


def otlp_target(*, endpoint: str | None = None, protocol: str | None = None) -> OTLPTarget | None:
    """The OTLP receiver :func:`configure` would export spans to, with an exporter for it.

    For a program that exports spans its own way (``subagent run --trace otlp`` exports a
    run's spans at once, then says whether the receiver took them): the same variables
    and arguments as :func:`configure`, read the same way, and nothing installed.

    Args:
        endpoint: Base URL of the receiver, overriding ``OTEL_EXPORTER_OTLP_ENDPOINT`` and
            ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (for OTLP/HTTP ``/v1/traces`` is
            appended).
        protocol: ``grpc`` or ``http/protobuf``, overriding the variables.

    Returns:
        The target, or ``None`` when no endpoint is configured.

    Raises:
        ValueError: The protocol (given or from a variable, which the message names) is
            not ``grpc`` or ``http/protobuf``.
        ImportError: The protocol's OTLP exporter is not installed.
    """
    chosen = _resolve_protocol(protocol)
    url, exporter_endpoint = _resolve_endpoint(endpoint, chosen)
    if url is None:
        return None
    return OTLPTarget(url, chosen, _otlp_exporter(chosen, exporter_endpoint))


def _otlp_metric_exporter(protocol: str, endpoint: str | None, url: str) -> MetricExporter:
    try:
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
                OTLPMetricExporter as GrpcExporter,
            )

            return GrpcExporter(endpoint=endpoint)
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
            OTLPMetricExporter as HttpExporter,
        )

        if any(os.environ.get(name, "").strip() for name in _CREDENTIAL_PROVIDER_VARIABLES):
            return HttpExporter(endpoint=endpoint)  # its session comes from the provider
        return _refusal_aware_exporter()(endpoint, url)
    except ImportError as exc:
        raise ImportError(_MISSING_EXPORTER.format(protocol=protocol, error=exc)) from exc


# --- a receiver that takes no metrics ---

_REFUSALS: Final = frozenset({404, 405, 501})
"""HTTP statuses by which an OTLP receiver says it has no ``/v1/metrics`` at all (Phoenix
answers 405, an OpenTelemetry Collector or Jaeger without a metrics pipeline 404)."""

_CREDENTIAL_PROVIDER_VARIABLES: Final = (
    "OTEL_PYTHON_EXPORTER_OTLP_HTTP_CREDENTIAL_PROVIDER",
    "OTEL_PYTHON_EXPORTER_OTLP_HTTP_METRICS_CREDENTIAL_PROVIDER",
)
_REFUSED_WARNING: Final = (
    "subagent.tracing: the OTLP receiver at %s refused metrics (HTTP %s): it takes no "
    "metrics (Phoenix and Jaeger take traces only), so no more are sent to it. Turn "
    "metrics off with OTEL_METRICS_EXPORTER=none (or configure(metrics=False)), or send "
    "them to a receiver that takes them with OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"
)


class _RefusalWatch(logging.Filter):
    """Sees the receiver refuse metrics, and drops the exporter's own line about it.

    The exporter's HTTP session reports every response here (a ``requests`` response
    hook, on the exporting thread); while a refusal is being exported, the exporter's
    error line on that thread is dropped: the guard warns once, in its own words.
    """

    def __init__(self) -> None:
        super().__init__()
        self._local = threading.local()

    def on_response(self, response: Any, *args: Any, **kwargs: Any) -> Any:
        if response.status_code in _REFUSALS:
            self._local.refused = response.status_code
        return response

    def take(self) -> int | None:
        """The refusal seen on this thread's export, if any (and forget it)."""
        refused: int | None = getattr(self._local, "refused", None)
        self._local.refused = None
        return refused

    def filter(self, record: logging.LogRecord) -> bool:
        return getattr(self._local, "refused", None) is None or record.levelno < logging.ERROR


@functools.cache
def _refusal_aware_exporter() -> Callable[[str | None, str], MetricExporter]:
    """The OTLP/HTTP metric exporter class that stops at the receiver's first refusal."""
    import requests
    from opentelemetry.exporter.otlp.proto.http import metric_exporter

    exporter_logger = logging.getLogger(metric_exporter.__name__)

    class RefusalAwareExporter(metric_exporter.OTLPMetricExporter):
        def __init__(self, endpoint: str | None, url: str) -> None:
            self._watch = _RefusalWatch()
            session = requests.Session()
            session.hooks["response"].append(self._watch.on_response)
            super().__init__(endpoint=endpoint, session=session)
            self._url = url
            self.refused: int | None = None
            exporter_logger.addFilter(self._watch)

        def export(
            self, metrics_data: MetricsData, timeout_millis: float | None = 10_000, **kwargs: Any
        ) -> MetricExportResult:
            if self.refused is not None:
                return MetricExportResult.FAILURE  # dropped: the receiver takes none
            try:
                return super().export(metrics_data, timeout_millis=timeout_millis, **kwargs)
            finally:
                refused = self._watch.take()
                if refused is not None:
                    self.refused = refused
                    _logger.warning(_REFUSED_WARNING, self._url, refused)

        def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
            exporter_logger.removeFilter(self._watch)
            super().shutdown(timeout_millis=timeout_millis, **kwargs)

    return RefusalAwareExporter


def _metrics_exporters(enabled: bool) -> tuple[str, ...]:
    """The exporters ``OTEL_METRICS_EXPORTER`` asks for (``otlp`` by default), none if off.

    Raises:
        ValueError: A value is not ``otlp``, ``console`` or ``none``, naming the variable.
    """
    if not enabled:
        return ()
    raw = os.environ.get(_METRICS_EXPORTER_VARIABLE, "").strip().lower() or "otlp"
    names = tuple(part.strip() for part in raw.split(",") if part.strip())
    for name in names:
        if name not in _METRICS_EXPORTERS:
            raise ValueError(
                f"{_METRICS_EXPORTER_VARIABLE}: unsupported metrics exporter {name!r}; use "
                f"one of {', '.join(_METRICS_EXPORTERS)} (or a comma-separated list of them)"
            )
    return () if "none" in names else names


class _AbortableExporter(SpanExporter):
    """The OTLP exporter as the batch processor sees it: one that can be told to stop.

    After :meth:`abort`, batches are dropped at once instead of being sent (and retried
    with backoff against a receiver that is down), and the exporter's own shutdown has
    interrupted any retry it was waiting on.
    """

    def __init__(self, inner: SpanExporter):
        self.inner = inner
        self._aborted = threading.Event()
        self._lock = threading.Lock()
        self._inner_shut = False
        self.dropped = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._aborted.is_set():
            self.dropped += len(spans)
            return SpanExportResult.FAILURE
        return self.inner.export(spans)

    def abort(self) -> None:
        """Drop every batch from now on, and interrupt the one being sent."""
        self._aborted.set()
        self.shutdown()

    def shutdown(self) -> None:
        """Shut the real exporter down, once."""
        with self._lock:
            if self._inner_shut:
                return
            self._inner_shut = True
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Nothing is buffered here; ask the real exporter."""
        return self.inner.force_flush(timeout_millis)


class _ShutdownRunner:
    """Runs a provider's ``shutdown()`` on its own thread, so the caller can stop waiting.

    The thread is started with the handle and waits idle: Python 3.12.0-3.12.1 refuse to start
    a thread during interpreter exit, which is when the ``atexit`` hook shuts down.
    """

    def __init__(self, shutdown: Callable[[], object], what: str = "tracer provider"):
        self._shutdown = shutdown
        self._what = what
        self._requested = threading.Event()
        self.done = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="subagent-tracing-shutdown", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        self._requested.wait()
        try:
            self._shutdown()
        except Exception:  # a processor that fails to shut down must not hang the caller
            _logger.exception("shutting down the %s failed", self._what)
        finally:
            self.done.set()

    def shutdown(self, timeout: float | None) -> bool:
        """Shut the provider down; ``False`` if that did not finish within ``timeout``."""
        if not self._thread.is_alive() and not self.done.is_set():
            # In a forked child the thread does not exist: shut down here, unbounded.
            self._run_inline()
            return True
        self._requested.set()
        return self.done.wait(timeout)

    def request(self) -> None:
        """Start shutting down without waiting (see :meth:`shutdown` to wait)."""
        if self._thread.is_alive():
            self._requested.set()

    def _run_inline(self) -> None:
        self._requested.set()
        self._run()


class Tracing:
    """What :func:`configure` set up: the providers, and how to flush and shut them down.

    Use it as a context manager, or call :meth:`shutdown`; otherwise it is shut down (and
    its spans flushed) when the interpreter exits.

    Attributes:
        provider: The SDK tracer provider (pass it to ``agent.run(tracer_provider=...)``
            when it is not the global one).
        endpoint: The URL spans are exported to, or ``None`` (console summary only).
        protocol: ``grpc`` or ``http/protobuf`` when exporting over OTLP, else ``None``.
        exporter: The OTLP span exporter, or ``None``.
        console: The console summary processor, or ``None``.
        shutdown_timeout: Seconds :meth:`shutdown` spends flushing, at most.
        meter_provider: The SDK meter provider (the global one when ``set_global``), or
            ``None`` when metrics are off (no endpoint, or ``OTEL_METRICS_EXPORTER=none``).
        metrics_endpoint: The URL metrics are exported to, or ``None``.
        metric_exporter: The OTLP (or console) metric exporter, or ``None``.
    """

    def __init__(
        self,
        provider: TracerProvider,
        *,
        endpoint: str | None,
        protocol: str | None,
        exporter: SpanExporter | None,
        console: ConsoleSummary | None,
        shutdown_timeout: float | None = DEFAULT_SHUTDOWN_TIMEOUT,
        _abortable: _AbortableExporter | None = None,
        meter_provider: MeterProvider | None = None,
        metrics_endpoint: str | None = None,
        metric_exporter: MetricExporter | None = None,
    ):
        self.provider = provider
        self.endpoint = endpoint
        self.protocol = protocol
        self.exporter = exporter
        self.console = console
        self.shutdown_timeout = check_seconds("shutdown_timeout", shutdown_timeout,
                                              allow_zero=True)  # fmt: skip
        self._abortable = _abortable
        self.meter_provider = meter_provider
        self.metrics_endpoint = metrics_endpoint
        self.metric_exporter = metric_exporter
        self._runner = _ShutdownRunner(provider.shutdown)
        self._meter_runner = (
            None
            if meter_provider is None
            else _ShutdownRunner(meter_provider.shutdown, "meter provider")
        )
        self._closed = False
        self._lock = threading.Lock()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Export every finished span and the metrics so far now (blocks the caller).

        Returns ``False`` if it timed out.
        """
        flushed = self.provider.force_flush(timeout_millis)
        if self.meter_provider is not None:
            flushed = self.meter_provider.force_flush(timeout_millis) and flushed
        return flushed

    def shutdown(self, timeout: float | None = None) -> bool:
        """Flush and stop exporting. Idempotent; later spans are dropped.

        Blocks for at most ``timeout`` seconds (default :attr:`shutdown_timeout`), however
        many spans are waiting and whether or not the receiver answers: past it, the
        export in progress is interrupted and the spans not exported yet are dropped.
        Metrics are collected and exported a last time, in parallel, within the same time.

        Args:
            timeout: Seconds to spend at most; ``None``: :attr:`shutdown_timeout`.

        Returns:
            ``True`` if everything was flushed in time (or the handle was already shut
            down), ``False`` if spans or metrics were dropped.
        """
        with self._lock:
            if self._closed:
                return True
            self._closed = True
        atexit.unregister(self.shutdown)
        limit = self.shutdown_timeout if timeout is None else timeout
        deadline = None if limit is None else time.monotonic() + limit
        meter_runner = self._meter_runner
        if meter_runner is not None:
            meter_runner.request()  # in parallel with the spans' flush
        spans_done = self._runner.shutdown(limit)
        metrics_done = True
        if meter_runner is not None:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            metrics_done = meter_runner.shutdown(left)
        if spans_done and metrics_done:
            return True
        if not spans_done and self._abortable is not None:
            self._abortable.abort()
        if not metrics_done and self.metric_exporter is not None:
            self._abort_metrics(self.metric_exporter)
        dropped = " and ".join(
            what for what, done in (("spans", spans_done), ("metrics", metrics_done)) if not done
        )
        _logger.warning(
            "subagent.tracing: %s not exported within %s s of shutdown were dropped "
            "(is the receiver at %s up?)",
            dropped,
            f"{limit:g}",
            self.endpoint if not spans_done else self.metrics_endpoint or self.endpoint,
        )
        return False

    @staticmethod
    def _abort_metrics(exporter: MetricExporter) -> None:
        """Interrupt the metric export under way (its retries wait on this shutdown)."""
        try:
            exporter.shutdown(timeout_millis=0)
        except Exception:  # already shut down, or failing: nothing more to stop
            _logger.debug("interrupting the metric exporter failed", exc_info=True)

    @property
    def closed(self) -> bool:
        """Whether :meth:`shutdown` was called."""
        return self._closed

    def __enter__(self) -> Tracing:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        target = f"{self.protocol} {self.endpoint}" if self.endpoint else "console"
        if self.meter_provider is not None:
            target += f", metrics {self.metrics_endpoint or 'console'}"
        return f"<Tracing {target}{' closed' if self._closed else ''}>"


def configure(
    service_name: str | None = None,
    *,
    endpoint: str | None = None,
    protocol: str | None = None,
    resource_attributes: Mapping[str, AttributeValue] | None = None,
    console: bool | None = None,
    stream: TextIO | None = None,
    set_global: bool = True,
    shutdown_timeout: float | None = DEFAULT_SHUTDOWN_TIMEOUT,
    metrics: bool = True,
) -> Tracing:
    """Set up the OpenTelemetry SDK to export runs' spans and metrics; for applications.

    The OTLP exporter follows the standard variables: ``OTEL_EXPORTER_OTLP_ENDPOINT`` or
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (where), ``OTEL_EXPORTER_OTLP_PROTOCOL`` or
    ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` (``http/protobuf``, the default, or ``grpc``),
    ``OTEL_EXPORTER_OTLP_HEADERS``, ``OTEL_EXPORTER_OTLP_TIMEOUT`` (seconds), and
    ``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES`` for the resource. Spans go through a
    ``BatchSpanProcessor`` (``OTEL_BSP_*``): a background thread exports them, so an
    unreachable receiver costs a run nothing. With no endpoint at all, a compact console
    summary (one line per turn and per run, on stderr) is printed instead.

    Metrics (``docs/tracing.md``, "Metrics") are exported over OTLP to the same receiver,
    or to ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_METRICS_PROTOCOL``
    when set, by a ``PeriodicExportingMetricReader`` (``OTEL_METRIC_EXPORT_INTERVAL``,
    ``OTEL_METRIC_EXPORT_TIMEOUT``, in milliseconds). ``OTEL_METRICS_EXPORTER`` picks the
    exporters: ``otlp`` (the default; only when an endpoint is configured), ``console``
    (printed on ``stream``), ``none``. With no exporter no meter provider is built, and
    runs record no metrics at all. A receiver of traces only (Phoenix, Jaeger) refuses
    metrics over OTLP/HTTP: the first refusal stops their export, with one warning on this
    module's logger that says how to turn them off or where to send them.

    Args:
        service_name: ``service.name`` of the resource; overrides ``OTEL_SERVICE_NAME``.
        endpoint: Base URL of the receiver (like ``OTEL_EXPORTER_OTLP_ENDPOINT``; for
            OTLP/HTTP ``/v1/traces`` is appended), overriding the variables. For gRPC
            use ``http://host:4317`` for a plaintext receiver.
        protocol: ``grpc`` or ``http/protobuf``, overriding the variables.
        resource_attributes: More resource attributes, e.g.
            ``{PROJECT_NAME_ATTRIBUTE: "calc"}`` to pick a Phoenix project.
        console: Print the console summary: ``None`` (default) only when there is no
            endpoint, ``True`` also next to OTLP, ``False`` never.
        stream: Where the console summary goes (default ``sys.stderr``).
        set_global: Install the provider as OpenTelemetry's global one, so runs without a
            ``tracer_provider`` use it. The global provider can be set only once per
            process.
        shutdown_timeout: Seconds the shutdown (at exit, or :meth:`Tracing.shutdown`)
            spends flushing, at most (default 10); spans not exported by then are dropped.
            ``None``: wait until the exporter gives up on each batch.
        metrics: Export metrics as the variables say (default); ``False``: never.

    Returns:
        A :class:`Tracing` handle; it is also shut down (spans flushed) at exit.

    Raises:
        ValueError: The protocol is not ``grpc`` or ``http/protobuf``,
            ``OTEL_METRICS_EXPORTER`` names an exporter other than ``otlp``, ``console`` or
            ``none``, or ``shutdown_timeout`` is not a number of seconds >= 0 (a
            ``ConfigurationError``).
        RuntimeError: ``set_global`` and a global tracer provider (or, with metrics on, a
            global meter provider) is already installed.
        ImportError: The ``otlp`` extra is not installed.
    """
    check_seconds("shutdown_timeout", shutdown_timeout, allow_zero=True)
    chosen_protocol = _resolve_protocol(protocol)
    url, exporter_endpoint = _resolve_endpoint(endpoint, chosen_protocol)
    metric_exporters = _metrics_exporters(metrics)
    metrics_protocol = _resolve_protocol(protocol, _METRICS_PROTOCOL_VARIABLES)
    metrics_url, metrics_exporter_endpoint = _resolve_endpoint(
        endpoint, metrics_protocol, "metrics"
    )
    if metrics_url is None:
        metric_exporters = tuple(name for name in metric_exporters if name != "otlp")
    if set_global and not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        raise RuntimeError(
            "a global tracer provider is already installed; call configure(set_global=False) "
            "and pass tracer_provider=handle.provider to runs"
        )
    if set_global and metric_exporters and _metrics_state._METER_PROVIDER is not None:
        raise RuntimeError(
            "a global meter provider is already installed; call configure(metrics=False), "
            "or configure(set_global=False) (runs record metrics to the global provider only)"
        )
    attributes: dict[str, AttributeValue] = dict(resource_attributes or {})
    if service_name:
        attributes[SERVICE_NAME] = service_name
    resource = Resource.create(attributes)
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    exporter: SpanExporter | None = None
    abortable: _AbortableExporter | None = None
    if url is not None:
        exporter = _otlp_exporter(chosen_protocol, exporter_endpoint)
        abortable = _AbortableExporter(exporter)
        provider.add_span_processor(BatchSpanProcessor(abortable))
    summary: ConsoleSummary | None = None
    if console or (console is None and url is None):
        summary = ConsoleSummary(stream)
        provider.add_span_processor(summary)
    meter_provider: MeterProvider | None = None
    metric_exporter: MetricExporter | None = None
    if metric_exporters:
        readers: list[MetricReader] = []
        for name in metric_exporters:
            if name == "otlp":
                metric_exporter = _otlp_metric_exporter(
                    metrics_protocol, metrics_exporter_endpoint, str(metrics_url)
                )
                readers.append(PeriodicExportingMetricReader(metric_exporter))
            else:
                console_exporter = ConsoleMetricExporter(out=stream or sys.stderr)
                metric_exporter = metric_exporter or console_exporter
                readers.append(PeriodicExportingMetricReader(console_exporter))
        meter_provider = MeterProvider(
            resource=resource, metric_readers=readers, shutdown_on_exit=False
        )
    if set_global:
        trace.set_tracer_provider(provider)
        if meter_provider is not None:
            set_meter_provider(meter_provider)
    handle = Tracing(
        provider,
        endpoint=url,
        protocol=chosen_protocol if url is not None else None,
        exporter=exporter,
        console=summary,
        shutdown_timeout=shutdown_timeout,
        _abortable=abortable,
        meter_provider=meter_provider,
        metrics_endpoint=metrics_url if metric_exporters and "otlp" in metric_exporters else None,
        metric_exporter=metric_exporter,
    )
    atexit.register(handle.shutdown)
    return handle
