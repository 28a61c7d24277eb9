"""subagent.tracing: configure(), the console summary, and what goes over the OTLP wire.

The wire tests run a tiny OTLP receiver on 127.0.0.1 (HTTP and gRPC) that decodes each
export request with opentelemetry-proto, so span kinds and resource attributes (which
Phoenix does not keep) are checked as sent.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import io
import logging
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from opentelemetry import metrics as otel_metrics
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
    OTLPMetricExporter as GrpcMetricExporter,
)
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
    OTLPMetricExporter as HttpMetricExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.proto.trace.v1.trace_pb2 import Span as WireSpan
from opentelemetry.proto.trace.v1.trace_pb2 import Status as WireStatus
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once
from otlp_receiver import Receiver, grpc_receiver, http_receiver, wire_attributes, wire_value
from support import CALC, Answer, unset_global_meter_provider

import subagent
from subagent import (
    ConfigurationError,
    LLMRequest,
    LLMResponse,
    ScriptedLLM,
    SubAgent,
    ToolCall,
    Usage,
    tracing,
)
from subagent.observe._metrics import metrics_observer
from subagent.tracing import (
    PROJECT_NAME_ATTRIBUTE,
    ConsoleSummary,
    configure,
    otlp_target,
    summary_line,
)

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parent.parent
OTEL_VARIABLES = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
    "OTEL_METRICS_EXPORTER",
    "OTEL_METRIC_EXPORT_INTERVAL",
)


def calc_script() -> ScriptedLLM:
    """A tool turn, an invalid answer, then a valid one (3 turns with max_turns=2)."""
    return ScriptedLLM(
        [
            LLMResponse(tool_calls=[ToolCall(name="add", arguments={"a": 1, "b": 2})]),
            '{"value": "three"}',
            '{"value": 3}',
        ]
    )


@pytest.fixture(autouse=True)
def clean_otel_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)


# --- a local OTLP receiver (tests/otlp_receiver.py) ---


@pytest.fixture(name="http_receiver")
def http_receiver_fixture() -> Iterator[Receiver]:
    with http_receiver() as receiver:
        yield receiver


@pytest.fixture(name="grpc_receiver")
def grpc_receiver_fixture() -> Iterator[Receiver]:
    with grpc_receiver() as receiver:
        yield receiver


@pytest.fixture(params=["http/protobuf", "grpc"])
def receiver(request: pytest.FixtureRequest) -> Receiver:
    name = "http_receiver" if request.param == "http/protobuf" else "grpc_receiver"
    receiver: Receiver = request.getfixturevalue(name)
    return receiver


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def unset_global_providers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the global tracer and meter providers unset until the test ends."""
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)
    monkeypatch.setattr(trace, "_TRACER_PROVIDER_SET_ONCE", Once())
    unset_global_meter_provider(monkeypatch)


# --- on the wire ---


async def test_spans_reach_an_otlp_receiver_with_kinds_resource_and_statuses(
    receiver: Receiver, request: pytest.FixtureRequest
) -> None:
    protocol = request.node.callspec.params["receiver"]
    handle = configure(
        "wire-test",
        endpoint=receiver.endpoint,
        protocol=protocol,
        resource_attributes={PROJECT_NAME_ATTRIBUTE: "wire-project", "deployment.env": "test"},
        console=False,
        set_global=False,
    )
    step = await CALC.run(
        {"question": "1+2"},
        llm=calc_script(),
        max_turns=2,
        return_retries=1,
        tracer_provider=handle.provider,
    )
    assert step.ok
    handle.shutdown()  # flushes the batch before returning

    received = receiver.spans()
    assert len(received) == 8
    for resource, scope, _ in received:
        assert resource["service.name"] == "wire-test"
        assert resource[PROJECT_NAME_ATTRIBUTE] == "wire-project"
        assert resource["deployment.env"] == "test"
        assert resource["telemetry.sdk.language"] == "python"
        assert (scope.name, scope.version) == ("subagent", subagent.__version__)
    assert sorted(span.name for _, _, span in received) == [
        "agent_turn must_return",
        "agent_turn normal",
        "agent_turn retry",
        "chat scripted",
        "chat scripted",
        "chat scripted",
        "execute_tool add",
        "invoke_agent calc",
    ]
    chats = receiver.named("chat scripted")
    run = receiver.one("invoke_agent calc")
    turns = {
        name: receiver.one(f"agent_turn {name}") for name in ("normal", "must_return", "retry")
    }
    tool = receiver.one("execute_tool add")

    internal, client = WireSpan.SPAN_KIND_INTERNAL, WireSpan.SPAN_KIND_CLIENT
    assert run.kind == internal and tool.kind == internal
    assert {turn.kind for turn in turns.values()} == {internal}
    assert {chat.kind for chat in chats} == {client}

    assert run.parent_span_id == b""
    assert {turn.parent_span_id for turn in turns.values()} == {run.span_id}
    assert tool.parent_span_id == turns["normal"].span_id
    assert sorted(chat.parent_span_id for chat in chats) == sorted(
        turn.span_id for turn in turns.values()
    )
    assert {span.trace_id for _, _, span in received} == {run.trace_id}

    assert run.status.code == WireStatus.STATUS_CODE_UNSET
    assert turns["must_return"].status.code == WireStatus.STATUS_CODE_ERROR
    assert turns["must_return"].status.message == "invalid_output: value: int_parsing"
    assert turns["retry"].status.code == WireStatus.STATUS_CODE_UNSET

    run_attributes = wire_attributes(run)
    assert run_attributes["subagent.outcome"] == "done"
    assert run_attributes["subagent.turns"] == 3
    failed = wire_attributes(turns["must_return"])
    assert failed["subagent.turn.index"] == 2
    assert failed["error.type"] == "invalid_output"
    assert failed["gen_ai.response.finish_reasons"] == ("stop",)
    assert wire_attributes(turns["retry"])["subagent.retry.attempt"] == 1


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
async def test_unreachable_endpoint_never_blocks_or_fails_a_run(
    protocol: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Export runs on the batch processor's thread: a run finishes while an export is stuck.

    The exporter is wrapped so that its first export blocks until the test releases it; the
    run's second model reply waits until that export has started. The run must complete with
    the export still stuck, and the spans then fail to reach the closed port, quietly.
    """
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "1")  # ms: export as soon as spans end
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")  # s: bounds shutdown's retries
    handle = configure(
        "closed",
        endpoint=f"http://127.0.0.1:{closed_port()}",
        protocol=protocol,
        console=False,
        set_global=False,
    )
    exporter = handle.exporter
    assert exporter is not None
    real_export = exporter.export
    export_started, release = threading.Event(), threading.Event()
    export_threads: list[int] = []
    results: list[SpanExportResult] = []

    def stuck_export(spans: Any) -> SpanExportResult:
        export_threads.append(threading.get_ident())
        export_started.set()
        release.wait(30)  # a bound for a broken test; released by the test when it passes
        result: SpanExportResult = real_export(spans)
        results.append(result)
        return result

    monkeypatch.setattr(exporter, "export", stuck_export)

    async def second_reply(request: LLMRequest) -> str:
        assert await anyio.to_thread.run_sync(export_started.wait, 30)
        return '{"value": 3}'

    llm = ScriptedLLM(['{"value": "three"}', second_reply])
    step = await CALC.run(
        {"question": "1+2"}, llm=llm, max_turns=1, return_retries=1, tracer_provider=handle.provider
    )
    assert step.ok
    assert export_started.is_set() and not release.is_set()  # finished during a stuck export
    assert export_threads[0] != threading.get_ident()  # the export is off the run's thread
    release.set()
    handle.shutdown()
    assert results and set(results) == {SpanExportResult.FAILURE}


async def test_metrics_reach_an_otlp_receiver_with_names_units_and_attributes(
    receiver: Receiver, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A corrected run with a tool call, exported by configure() and flushed at shutdown."""
    protocol = request.node.callspec.params["receiver"]
    unset_global_providers(monkeypatch)
    handle = configure("metrics-wire", endpoint=receiver.endpoint, protocol=protocol,
                       console=False)  # fmt: skip
    try:
        script = ScriptedLLM(
            [
                LLMResponse(tool_calls=[ToolCall(name="add", arguments={"a": 1, "b": 2})]),
                '{"value": "three"}',
                LLMResponse(text='{"value": 3}', usage=Usage(input_tokens=40, output_tokens=4)),
            ]
        )
        step = await CALC.run({"question": "1+2"}, llm=script, max_turns=2, return_retries=1)
        assert step.ok and len(step.turns) == 3
    finally:
        assert handle.shutdown() is True
    suffix = "" if protocol == "grpc" else "/v1/metrics"
    assert handle.metrics_endpoint == receiver.endpoint + suffix

    received = receiver.metrics()
    assert {resource["service.name"] for resource, _, _ in received} == {"metrics-wire"}
    assert {scope.name for _, scope, _ in received} == {"subagent"}
    metrics = {metric.name: metric for _, _, metric in received}
    assert {name: metric.unit for name, metric in metrics.items()} == {
        "gen_ai.client.token.usage": "{token}",
        "gen_ai.client.operation.duration": "s",
        "gen_ai.invoke_agent.duration": "s",
        "gen_ai.execute_tool.duration": "s",
        "subagent.runs": "{run}",
        "subagent.turns": "{turn}",
        "subagent.corrections": "{turn}",
    }

    def points(name: str) -> list[tuple[dict[str, Any], Any]]:
        metric = metrics[name]
        kind = metric.WhichOneof("data")
        return [(wire_attributes(point), point) for point in getattr(metric, kind).data_points]

    chat = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "scripted",
            "gen_ai.request.model": "scripted"}  # fmt: skip
    tokens = {attributes["gen_ai.token.type"]: (attributes, point)
              for attributes, point in points("gen_ai.client.token.usage")}  # fmt: skip
    assert tokens["input"][0] == {**chat, "gen_ai.token.type": "input"}
    assert (tokens["input"][1].count, tokens["input"][1].sum) == (3, 40)
    assert (tokens["output"][1].count, tokens["output"][1].sum) == (3, 4)
    ((call_attributes, calls),) = points("gen_ai.client.operation.duration")
    assert call_attributes == chat and calls.count == 3
    ((tool_attributes, tools),) = points("gen_ai.execute_tool.duration")
    assert tool_attributes == {
        "gen_ai.operation.name": "execute_tool", "gen_ai.agent.name": "calc",
        "gen_ai.tool.name": "add", "gen_ai.tool.type": "function",
    }  # fmt: skip
    assert tools.count == 1
    ((run_attributes, run),) = points("gen_ai.invoke_agent.duration")
    assert run_attributes == {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "calc",
        "gen_ai.request.model": "scripted",
    }  # fmt: skip
    assert run.count == 1 and run.sum > 0
    turns = {(a["subagent.turn.type"], a["subagent.turn.outcome"], a.get("error.type")): p.as_int
             for a, p in points("subagent.turns")}  # fmt: skip
    assert turns == {("normal", "continue", None): 1, ("must_return", "error", "invalid_output"): 1,
                     ("retry", "success", None): 1}  # fmt: skip
    assert [(a, p.as_int) for a, p in points("subagent.corrections")] == [
        (
            {
                "gen_ai.agent.name": "calc",
                "subagent.turn.outcome": "success",
                "subagent.turn.repeated": False,
            },
            1,
        )
    ]
    assert [(a, p.as_int) for a, p in points("subagent.runs")] == [
        ({"gen_ai.agent.name": "calc", "subagent.outcome": "done"}, 1)
    ]


def test_a_receiver_that_refuses_metrics_is_asked_once_and_warned_about_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Phoenix answers 405 on /v1/metrics: before, every export (each interval, and at
    # exit) logged "Failed to export metrics batch code: 405".
    with http_receiver(metrics_status=405) as receiver:
        handle = configure("trace-only", endpoint=receiver.endpoint, set_global=False,
                           console=False)  # fmt: skip
        assert handle.meter_provider is not None
        counter = handle.meter_provider.get_meter("test").create_counter("calls")
        with caplog.at_level(logging.INFO):
            for _ in range(3):
                counter.add(1)
                handle.force_flush()
            with handle.provider.get_tracer("test").start_as_current_span("still traced"):
                pass
            assert handle.shutdown() is True
    assert receiver.refused_metrics == ["/v1/metrics"]  # asked once, never again
    assert receiver.named("still traced")  # spans go on
    logged = [(r.name, r.levelno, r.getMessage()) for r in caplog.records
              if r.levelno >= logging.WARNING]  # fmt: skip
    assert [(name, level) for name, level, _ in logged] == [("subagent.tracing", logging.WARNING)]
    message = logged[0][2]
    assert f"{receiver.endpoint}/v1/metrics refused metrics (HTTP 405)" in message
    assert "OTEL_METRICS_EXPORTER=none" in message
    assert "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT" in message


def test_a_receiver_that_takes_metrics_keeps_getting_them() -> None:
    with http_receiver() as receiver:
        handle = configure(endpoint=receiver.endpoint, set_global=False, console=False)
        assert handle.meter_provider is not None
        counter = handle.meter_provider.get_meter("test").create_counter("calls")
        for _ in range(2):
            counter.add(1)
            handle.force_flush()
        handle.shutdown()
    assert len(receiver.metric_requests) == 3  # two flushes and the last export at shutdown


def test_configure_builds_the_metric_exporter_from_the_standard_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318/")
    with configure(set_global=False) as handle:
        assert isinstance(handle.metric_exporter, HttpMetricExporter)
        assert isinstance(handle.meter_provider, MeterProvider)
        assert handle.metrics_endpoint == "http://127.0.0.1:4318/v1/metrics"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "grpc")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://127.0.0.1:4317")
    with configure(set_global=False) as handle:
        assert isinstance(handle.exporter, HttpExporter)  # spans keep the general settings
        assert handle.endpoint == "http://127.0.0.1:4318/v1/traces"
        assert isinstance(handle.metric_exporter, GrpcMetricExporter)
        assert handle.metrics_endpoint == "http://127.0.0.1:4317"
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
    with configure(set_global=False) as handle:
        assert handle.meter_provider is None and handle.metric_exporter is None
    monkeypatch.delenv("OTEL_METRICS_EXPORTER")
    with configure(set_global=False, metrics=False) as handle:
        assert handle.meter_provider is None


def test_without_an_endpoint_configure_sets_up_no_metrics(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    unset_global_providers(monkeypatch)
    with configure(console=False) as handle:
        assert handle.meter_provider is None
        assert metrics_observer("calc", ScriptedLLM([])) is None  # runs record nothing


async def test_console_metrics_exporter_prints_the_metrics_at_shutdown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    unset_global_providers(monkeypatch)
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "console")
    stream = io.StringIO()
    with configure(console=False, stream=stream) as handle:
        assert handle.meter_provider is not None and handle.metrics_endpoint is None
        step = await CALC.run({"question": "1+2"}, llm=ScriptedLLM(['{"value": 3}']))
        assert step.ok
    assert '"name": "subagent.runs"' in stream.getvalue()


def test_configure_rejects_an_unknown_metrics_exporter_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "prometheus")
    with pytest.raises(ValueError, match=r"^OTEL_METRICS_EXPORTER: unsupported metrics exporter"):
        configure(set_global=False)


def test_configure_refuses_to_replace_an_installed_global_meter_provider(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    unset_global_providers(monkeypatch)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    installed = MeterProvider(shutdown_on_exit=False)
    otel_metrics.set_meter_provider(installed)
    with pytest.raises(RuntimeError, match="global meter provider is already installed"):
        configure()
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)  # nothing set
    with configure(metrics=False) as handle:  # spans alone are fine
        assert handle.meter_provider is None
    assert otel_metrics.get_meter_provider() is installed


def test_configure_builds_the_exporter_from_the_standard_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318/")
    with configure(set_global=False) as handle:
        assert isinstance(handle.exporter, HttpExporter)
        assert (handle.protocol, handle.endpoint) == (
            "http/protobuf",
            "http://127.0.0.1:4318/v1/traces",
        )
        assert handle.console is None
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
    with configure(set_global=False) as handle:
        assert isinstance(handle.exporter, GrpcExporter)
        assert (handle.protocol, handle.endpoint) == ("grpc", "http://127.0.0.1:4317")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:9999/custom")
    with configure(set_global=False) as handle:
        assert isinstance(handle.exporter, HttpExporter)
        assert handle.endpoint == "http://127.0.0.1:9999/custom"
    with configure(endpoint="http://127.0.0.1:4317", protocol="grpc", set_global=False) as handle:
        assert isinstance(handle.exporter, GrpcExporter)
        assert handle.endpoint == "http://127.0.0.1:4317"


def test_service_name_argument_overrides_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-env")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "team=agents")
    with configure(set_global=False, console=False) as handle:
        assert handle.provider.resource.attributes["service.name"] == "from-env"
        assert handle.provider.resource.attributes["team"] == "agents"
    with configure("from-code", set_global=False, console=False) as handle:
        assert handle.provider.resource.attributes["service.name"] == "from-code"


def test_configure_rejects_an_unknown_protocol_naming_its_source(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(ValueError, match=r"^protocol: unsupported OTLP protocol 'http/json'"):
        configure(protocol="http/json", set_global=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "thrift")
    with pytest.raises(ValueError, match="OTEL_EXPORTER_OTLP_PROTOCOL: unsupported"):
        configure(set_global=False)


def test_configure_refuses_to_replace_an_installed_global_provider(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    installed = TracerProvider(shutdown_on_exit=False)
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: installed)
    with pytest.raises(RuntimeError, match="global tracer provider is already installed"):
        configure()


def test_configure_with_set_global_false_leaves_the_global_provider_alone() -> None:
    with configure(set_global=False, console=False):
        assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def test_handle_shuts_down_once_as_a_context_manager() -> None:
    with configure(set_global=False) as handle:
        assert not handle.closed
        assert repr(handle) == "<Tracing console>"
    assert handle.closed
    handle.shutdown()  # idempotent
    assert repr(handle) == "<Tracing console closed>"


def test_missing_otlp_extra_gives_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [name for name in sys.modules if name.startswith("opentelemetry.sdk")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk", None)
    monkeypatch.delitem(sys.modules, "subagent.tracing")
    with pytest.raises(ImportError, match=r"pip install 'subagent-runtime\[otlp\]'"):
        importlib.import_module("subagent.tracing")


def test_missing_exporter_package_gives_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.grpc.trace_exporter", None)
    with pytest.raises(ImportError, match=r"OTLP grpc exporter is not installed.*\[otlp\]"):
        configure(endpoint="http://127.0.0.1:4317", protocol="grpc", set_global=False)


# --- otlp_target(): the receiver the variables name, for a program that exports itself ---


def test_otlp_target_is_none_without_an_endpoint() -> None:
    assert otlp_target() is None


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_otlp_target_exports_to_the_receiver_the_variables_name(
    protocol: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    receiver: Receiver = request.getfixturevalue(
        "grpc_receiver" if protocol == "grpc" else "http_receiver"
    )
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
    target = otlp_target()
    assert target is not None
    expected = receiver.endpoint if protocol == "grpc" else f"{receiver.endpoint}/v1/traces"
    assert (target.url, target.protocol) == (expected, protocol)
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    provider.get_tracer("test").start_span("sent once").end()
    try:
        assert target.exporter.export(memory.get_finished_spans()) is SpanExportResult.SUCCESS
    finally:
        target.exporter.shutdown()
        provider.shutdown()
    assert [span.name for _, _, span in receiver.spans()] == ["sent once"]


def test_otlp_target_arguments_and_the_traces_variable_win(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:2/traces")
    target = otlp_target()
    assert target is not None and target.url == "http://127.0.0.1:2/traces"
    target.exporter.shutdown()
    target = otlp_target(endpoint="http://127.0.0.1:3/", protocol="grpc")
    assert target is not None and (target.url, target.protocol) == ("http://127.0.0.1:3", "grpc")
    assert isinstance(target.exporter, GrpcExporter)
    target.exporter.shutdown()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json")
    with pytest.raises(ValueError, match=r"^OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: unsupported"):
        otlp_target()


# --- the console summary ---

TURN_LINE = re.compile(r"^(?P<body>.*)  \d+(\.\d)?ms$")


def bodies(text: str) -> list[str]:
    """The lines without their durations."""
    lines = []
    for line in text.splitlines():
        match = TURN_LINE.match(line)
        assert match is not None, line
        lines.append(match["body"])
    return lines


async def test_without_endpoint_configure_prints_one_line_per_turn_and_run() -> None:
    out = io.StringIO()
    with configure("console-test", stream=out, set_global=False) as handle:
        assert handle.endpoint is None and handle.exporter is None
        await CALC.run(
            {"question": "1+2"},
            llm=calc_script(),
            max_turns=2,
            return_retries=1,
            tracer_provider=handle.provider,
        )
    assert bodies(out.getvalue()) == [
        "calc  turn 1 normal  continue  work=1 retries=1",
        "calc  turn 2 must_return  error  invalid_output  work=0 retries=1",
        "calc  turn 3 retry  success  work=0 retries=0",
        "calc  done  3 turns  tokens in=0 out=0",
    ]


async def test_console_summary_reports_failures_and_indents_nested_runs() -> None:
    inner = SubAgent(
        name="adder",
        prompt="Add {{a}} {{b}}",
        output=Answer,
        max_turns=1,
        llm=ScriptedLLM(["not json"]),
    )
    outer = SubAgent(name="boss", prompt="Solve", output=Answer, tools=[inner.as_tool()])
    llm = ScriptedLLM(
        [
            LLMResponse(tool_calls=[ToolCall(name="adder", arguments={"a": "1", "b": "2"})]),
            '{"value": 3}',
        ]
    )
    out = io.StringIO()
    with configure(stream=out, set_global=False) as handle:
        await outer.run(llm=llm, max_turns=2, tracer_provider=handle.provider)
    assert bodies(out.getvalue()) == [
        "  adder  turn 1 must_return  error  invalid_output  work=0 retries=0",
        "  adder  failed budget_exhausted  1 turn  tokens in=0 out=0",
        "boss  turn 1 normal  error  tool_error  work=1 retries=0",
        "boss  turn 2 must_return  success  work=0 retries=0",
        "boss  done  2 turns  tokens in=0 out=0",
    ]


async def test_console_summary_never_breaks_a_run() -> None:
    class Broken(io.StringIO):
        def write(self, text: str) -> int:
            raise OSError("disk full")

    with configure(stream=Broken(), set_global=False) as handle:
        step = await CALC.run(
            {"question": "1+2"}, llm=ScriptedLLM(['{"value": 3}']), tracer_provider=handle.provider
        )
    assert step.ok


def test_summary_line_ignores_chat_and_tool_spans() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    step = CALC.run_sync(
        {"question": "1+2"},
        llm=calc_script(),
        max_turns=2,
        return_retries=1,
        tracer_provider=provider,
    )
    assert step.ok
    lines = {span.name: summary_line(span, "calc") for span in exporter.get_finished_spans()}
    assert lines["chat scripted"] is None
    assert lines["execute_tool add"] is None
    assert lines["agent_turn retry"] is not None
    assert lines["agent_turn retry"].startswith("calc  turn 3 retry  success")


def test_console_summary_is_a_span_processor() -> None:
    summary = ConsoleSummary(io.StringIO())
    assert summary.force_flush() is True
    summary.shutdown()


# --- the example ---


def _demo_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(extra)
    return env


def test_tracing_demo_prints_the_console_summary_without_an_endpoint() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "tracing_demo.py")],
        env=_demo_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert (
        "done in 3 turns (normal, must_return, retry); spans sent to the console" in result.stdout
    )
    assert bodies(result.stderr) == [
        "calc  turn 1 normal  continue  work=1 retries=1",
        "calc  turn 2 must_return  error  invalid_output  work=0 retries=1",
        "calc  turn 3 retry  success  work=0 retries=0",
        "calc  done  3 turns  tokens in=723 out=38",
    ]


def test_tracing_demo_exports_to_the_endpoint_and_flushes_at_exit(
    http_receiver: Receiver,
) -> None:
    """The demo never calls shutdown(): the atexit hook flushes the batch."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "tracing_demo.py")],
        env=_demo_env(OTEL_EXPORTER_OTLP_ENDPOINT=http_receiver.endpoint),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert f"spans sent to http/protobuf {http_receiver.endpoint}/v1/traces" in result.stdout
    assert result.stderr == ""
    received = http_receiver.spans()
    assert {resource["service.name"] for resource, _, _ in received} == {"subagent-demo"}
    names = sorted(span.name for _, _, span in received)
    assert names == sorted(
        [
            "invoke_agent calc",
            "agent_turn normal",
            "agent_turn must_return",
            "agent_turn retry",
            "chat scripted-demo",
            "chat scripted-demo",
            "chat scripted-demo",
            "execute_tool add",
        ]
    )
    chat = next(
        span for _, _, span in received if span.name == "chat scripted-demo" and span.events
    )
    assert [event.name for event in chat.events] == ["transport_retry"]
    event = {kv.key: wire_value(kv.value) for kv in chat.events[0].attributes}
    assert event["error.type"] == "rate_limit"
    assert event["subagent.retry.delay_s"] == pytest.approx(0.05)


# A process that traced runs to a collector that is down, then exits without calling
# shutdown(): the atexit hook flushes. Prints the time its last run ended.
_DEAD_COLLECTOR_CHILD = """
import sys, time
import anyio
from subagent import ScriptedLLM, SubAgent, tracing

runs, endpoint = int(sys.argv[1]), sys.argv[2]
options = {} if sys.argv[3] == "default" else {"shutdown_timeout": float(sys.argv[3])}
tracing.configure(service_name="dead-collector", endpoint=endpoint, console=False, **options)
agent = SubAgent(name="probe", prompt="hi", max_turns=2)

async def main():
    for _ in range(runs):
        await agent.run(llm=ScriptedLLM(["done"]))

anyio.run(main)
print(time.time(), flush=True)
"""


def _seconds_to_exit(runs: int, shutdown_timeout: str) -> float:
    endpoint = f"http://127.0.0.1:{closed_port()}"
    with subprocess.Popen(
        [sys.executable, "-c", _DEAD_COLLECTOR_CHILD, str(runs), endpoint, shutdown_timeout],
        env=_demo_env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    ) as child:  # fmt: skip
        assert child.stdout is not None
        try:
            last_run_ended = float(child.stdout.readline())
            child.wait(timeout=120)
        finally:
            child.kill()
    return time.time() - last_run_ended


# The bound asserted is the documented one plus 5 s of margin for a loaded machine: with the
# collector down, exit took ~7 s after one run (the exporter's own retries, within the
# bound) and ~30 s after 1,000 runs (several batches, each retried for ~7 s).
def test_exit_with_a_dead_collector_is_bounded_after_a_large_backlog() -> None:
    elapsed = _seconds_to_exit(1_000, "default")
    assert elapsed < tracing.DEFAULT_SHUTDOWN_TIMEOUT + 5, f"exit took {elapsed:.1f} s"


def test_exit_with_a_dead_collector_honours_a_shorter_shutdown_timeout() -> None:
    elapsed = _seconds_to_exit(1, "1")
    assert elapsed < 1 + 5, f"exit took {elapsed:.1f} s"


def test_shutdown_returns_within_its_timeout_and_says_spans_were_dropped() -> None:
    handle = configure(endpoint=f"http://127.0.0.1:{closed_port()}", console=False,
                       set_global=False)  # fmt: skip
    tracer = handle.provider.get_tracer("test")
    for _ in range(2_000):
        tracer.start_span("span").end()
    started = time.monotonic()
    assert handle.shutdown(timeout=0.5) is False
    assert time.monotonic() - started < 3
    assert handle.closed and handle.shutdown() is True  # idempotent


@pytest.mark.parametrize("value", [-1, float("nan"), "10"])
def test_bad_shutdown_timeout_names_the_field(value: object) -> None:
    with pytest.raises(ConfigurationError, match=r"^shutdown_timeout: "):
        configure(console=False, set_global=False, shutdown_timeout=value)  # type: ignore[arg-type]


def test_tracing_module_is_public() -> None:
    assert tracing.configure is configure
    assert "configure" in tracing.__all__


# --- tracing/: the Jaeger and Phoenix set-ups ---


def _env_file(path: Path) -> dict[str, str]:
    values = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            values[key] = value
    return values


@pytest.mark.parametrize("env_file", sorted((ROOT / "tracing").glob("*.env")), ids=lambda p: p.name)
def test_the_env_files_point_at_a_trace_only_receiver_with_metrics_off(
    env_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    values = _env_file(env_file)
    assert values.get("OTEL_METRICS_EXPORTER") == "none"
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    with configure(set_global=False, console=False) as handle:
        assert handle.endpoint is not None  # spans are exported...
        assert handle.meter_provider is None and handle.metric_exporter is None  # metrics not


def test_jaeger_env_points_configure_at_the_compose_receiver(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    values = _env_file(ROOT / "tracing" / "jaeger.env")
    assert set(values) == {
        "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_SERVICE_NAME",
        "OTEL_METRICS_EXPORTER",
    }  # fmt: skip
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    with configure(set_global=False) as handle:
        assert isinstance(handle.exporter, HttpExporter)
        assert handle.endpoint == "http://localhost:4318/v1/traces"
        assert handle.provider.resource.attributes["service.name"] == "subagent-app"
    compose = (ROOT / "tracing" / "compose.yaml").read_text()
    for port in (16686, 4317, 4318):
        assert f'"127.0.0.1:{port}:{port}"' in compose
    assert "receivers.otlp.protocols.grpc.endpoint=0.0.0.0:4317" in compose
    assert "receivers.otlp.protocols.http.endpoint=0.0.0.0:4318" in compose


def test_configure_in_detail_block_shows_every_argument_at_its_default() -> None:
    """docs/tracing.md's "in detail" block is copied as is: each value is the real default."""
    page = (ROOT / "docs" / "tracing.md").read_text(encoding="utf-8")
    section = page.split("## `configure()` in detail", 1)[1]
    block = section.split("```python\n", 1)[1].split("```", 1)[0]
    call = ast.parse(block).body[0]
    assert isinstance(call, ast.Assign) and isinstance(call.value, ast.Call)
    shown = {keyword.arg: ast.literal_eval(keyword.value) for keyword in call.value.keywords}
    parameters = inspect.signature(configure).parameters
    assert set(shown) == set(parameters)
    assert shown.pop("service_name") == "calc-app"  # the one example value, not a default
    assert shown == {name: parameters[name].default for name in shown}
