"""A tiny OTLP receiver on 127.0.0.1 (HTTP and gRPC) that decodes each export request.

Used where spans must be checked as sent over the wire (span kinds, resource attributes,
trace and parent ids across processes): ``tests/test_tracing.py`` and ``tests/test_ray.py``.
It takes metrics too (``/v1/metrics``, the gRPC ``MetricsService``), for the metrics sent by
``subagent.tracing.configure()``.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from opentelemetry.proto.collector.metrics.v1 import (
    metrics_service_pb2,
    metrics_service_pb2_grpc,
)
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric as WireMetric
from opentelemetry.proto.trace.v1.trace_pb2 import Span as WireSpan

__all__ = ["Receiver", "grpc_receiver", "http_receiver", "wire_attributes", "wire_value"]


@dataclass
class Receiver:
    """Decoded OTLP export requests, from the HTTP or the gRPC receiver."""

    endpoint: str
    requests: list[trace_service_pb2.ExportTraceServiceRequest] = field(default_factory=list)
    metric_requests: list[metrics_service_pb2.ExportMetricsServiceRequest] = field(
        default_factory=list
    )
    refused_metrics: list[str] = field(default_factory=list)

    def spans(self) -> list[tuple[dict[str, Any], Any, WireSpan]]:
        """``(resource attributes, scope, span)`` of every received span."""
        found = []
        for request in list(self.requests):
            for resource_spans in request.resource_spans:
                resource = {
                    kv.key: wire_value(kv.value) for kv in resource_spans.resource.attributes
                }
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        found.append((resource, scope_spans.scope, span))
        return found

    def metrics(self) -> list[tuple[dict[str, Any], Any, WireMetric]]:
        """``(resource attributes, scope, metric)`` of every received metric."""
        found = []
        for request in list(self.metric_requests):
            for resource_metrics in request.resource_metrics:
                resource = {
                    kv.key: wire_value(kv.value) for kv in resource_metrics.resource.attributes
                }
                for scope_metrics in resource_metrics.scope_metrics:
                    for metric in scope_metrics.metrics:
                        found.append((resource, scope_metrics.scope, metric))
        return found

    def named(self, name: str) -> list[WireSpan]:
        return [span for _, _, span in self.spans() if span.name == name]

    def one(self, name: str) -> WireSpan:
        found = self.named(name)
        assert len(found) == 1, f"{len(found)} spans named {name!r}"
        return found[0]


def wire_value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(wire_value(item) for item in value.array_value.values)
    return getattr(value, kind) if kind else None


def wire_attributes(span: Any) -> dict[str, Any]:
    """The attributes of a span or a metric's data point, as Python values."""
    return {kv.key: wire_value(kv.value) for kv in span.attributes}


@contextmanager
def http_receiver(*, metrics_status: int | None = None) -> Iterator[Receiver]:
    """An OTLP/HTTP receiver (``/v1/traces``, ``/v1/metrics``) for the block's duration.

    Args:
        metrics_status: Answer every ``/v1/metrics`` request with this status instead of
            taking it, as a receiver of traces only does (Phoenix: 405). The refused
            requests are still counted in ``refused_metrics``.
    """
    received: list[trace_service_pb2.ExportTraceServiceRequest] = []
    received_metrics: list[metrics_service_pb2.ExportMetricsServiceRequest] = []
    refused: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            ok = True
            reply: bytes
            if self.path == "/v1/metrics" and metrics_status is not None:
                refused.append(self.path)
                self.send_response(metrics_status)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if self.path == "/v1/traces":
                request = trace_service_pb2.ExportTraceServiceRequest()
                request.ParseFromString(body)
                received.append(request)
                reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
            elif self.path == "/v1/metrics":
                metrics_request = metrics_service_pb2.ExportMetricsServiceRequest()
                metrics_request.ParseFromString(body)
                received_metrics.append(metrics_request)
                reply = metrics_service_pb2.ExportMetricsServiceResponse().SerializeToString()
            else:
                ok, reply = False, b""
            self.send_response(200 if ok else 404)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Receiver(
            f"http://127.0.0.1:{server.server_address[1]}", received, received_metrics, refused
        )
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@contextmanager
def grpc_receiver() -> Iterator[Receiver]:
    """An OTLP/gRPC receiver (plaintext) for the duration of the block."""
    received: list[trace_service_pb2.ExportTraceServiceRequest] = []
    received_metrics: list[metrics_service_pb2.ExportMetricsServiceRequest] = []

    class Collector(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request: Any, context: Any) -> Any:
            received.append(request)
            return trace_service_pb2.ExportTraceServiceResponse()

    class MetricsCollector(metrics_service_pb2_grpc.MetricsServiceServicer):
        def Export(self, request: Any, context: Any) -> Any:
            received_metrics.append(request)
            return metrics_service_pb2.ExportMetricsServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Collector(), server)
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(MetricsCollector(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield Receiver(f"http://127.0.0.1:{port}", received, received_metrics)
    finally:
        server.stop(grace=None).wait()
