"""A tiny OTLP receiver on 127.0.0.1 (HTTP and gRPC) that decodes each export request.

Used where spans must be checked as sent over the wire (span kinds, resource attributes,
trace and parent ids across processes): ``tests/test_tracing.py`` and ``tests/test_ray.py``.
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
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as WireSpan

__all__ = ["Receiver", "grpc_receiver", "http_receiver", "wire_attributes", "wire_value"]


@dataclass
class Receiver:
    """Decoded OTLP export requests, from the HTTP or the gRPC receiver."""

    endpoint: str
    requests: list[trace_service_pb2.ExportTraceServiceRequest] = field(default_factory=list)

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


def wire_attributes(span: WireSpan) -> dict[str, Any]:
    return {kv.key: wire_value(kv.value) for kv in span.attributes}


@contextmanager
def http_receiver() -> Iterator[Receiver]:
    """An OTLP/HTTP receiver (``/v1/traces``) for the duration of the block."""
    received: list[trace_service_pb2.ExportTraceServiceRequest] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            request = trace_service_pb2.ExportTraceServiceRequest()
            request.ParseFromString(body)
            ok = self.path == "/v1/traces"
            if ok:
                received.append(request)
            reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
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
        yield Receiver(f"http://127.0.0.1:{server.server_address[1]}", received)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@contextmanager
def grpc_receiver() -> Iterator[Receiver]:
    """An OTLP/gRPC receiver (plaintext) for the duration of the block."""
    received: list[trace_service_pb2.ExportTraceServiceRequest] = []

    class Collector(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request: Any, context: Any) -> Any:
            received.append(request)
            return trace_service_pb2.ExportTraceServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Collector(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield Receiver(f"http://127.0.0.1:{port}", received)
    finally:
        server.stop(grace=None).wait()
