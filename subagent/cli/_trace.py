"""``--trace console|otlp``: a run's spans kept in memory, then shown or exported at once."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

from subagent._loading import described
from subagent.cli._model import safe_url
from subagent.cli._show import span_tree
from subagent.cli._status import UsageError

__all__ = ["traced"]


@contextlib.contextmanager
def traced(mode: str | None) -> Iterator[tuple[Any, Callable[[], None]]]:
    """``(tracer provider or None, report)`` for ``--trace console|otlp``.

    The spans are kept in memory; after the run ``report`` prints their tree (console) or
    exports them all at once and says whether the receiver took them (otlp).

    Raises:
        UsageError: The OpenTelemetry SDK is not installed; ``otlp``: no receiver is
            configured, its protocol is unknown or its exporter not installed.
    """
    if mode is None:
        yield None, lambda: None
        return
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        from subagent import tracing
    except ImportError:
        raise UsageError(
            "--trace: needs the OpenTelemetry SDK, which comes with the otlp "
            "extra: pip install 'subagent-runtime[otlp]'"
        ) from None
    report: Callable[[], None]
    memory = InMemorySpanExporter()
    if mode == "console":
        provider = TracerProvider()

        def report() -> None:
            print(span_tree(memory.get_finished_spans()), file=sys.stderr)

    else:
        try:
            found = tracing.otlp_target()
        except (ValueError, ImportError) as exc:
            raise UsageError(f"--trace otlp: {exc}") from None
        if found is None:
            raise UsageError(
                "--trace otlp: no receiver: set OTEL_EXPORTER_OTLP_ENDPOINT (or "
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT); --trace alone prints the tree"
            )
        target = found  # bound for the closure below
        service = os.environ.get("OTEL_SERVICE_NAME") or "subagent-cli"
        provider = TracerProvider(resource=Resource.create({"service.name": service}))
        where = f"{safe_url(target.url)} (OTLP/{target.protocol})"

        def report() -> None:
            spans = memory.get_finished_spans()
            try:
                outcome = target.exporter.export(spans)
            except Exception as exc:  # an exporter that raises instead of reporting
                outcome = SpanExportResult.FAILURE
                print(f"--trace otlp: {described(exc)}", file=sys.stderr)
            finally:
                target.exporter.shutdown()
            if outcome is SpanExportResult.SUCCESS:
                print(f"{len(spans)} spans exported to {where}", file=sys.stderr)
            else:
                print(
                    f"--trace otlp: exporting {len(spans)} spans to {where} failed: the "
                    "receiver was unreachable or refused them (none were exported)",
                    file=sys.stderr,
                )

    provider.add_span_processor(SimpleSpanProcessor(memory))
    try:
        yield provider, report
    finally:
        provider.shutdown()
