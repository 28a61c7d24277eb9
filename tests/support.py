"""Shared test helpers: the calculator agent, an in-memory span recorder, example runners.

Fixtures built on these live in ``conftest.py``; test modules import the helpers directly
(``from support import CALC, Traced``).
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import opentelemetry._logs._internal as logs_state
import opentelemetry.metrics._internal as metrics_state
import pytest
from opentelemetry import _logs, metrics
from opentelemetry.context import Context
from opentelemetry.sdk._logs import LoggerProvider, ReadableLogRecord
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, Metric
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace import Span as SdkSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once
from pydantic import BaseModel

from subagent import SubAgent, Tool
from subagent.observe import _semconv
from subagent.observe._otel import CAPTURE_CONTENT_ENV
from subagent.observe._semconv import STABILITY_OPT_IN_ENV, refresh_semconv
from subagent.tools import SourceNotReadyError

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


class Answer(BaseModel):
    value: int


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


CALC = SubAgent(name="calc", prompt="Compute {{question}}", output=Answer, tools=[add])
"""The quickstart's calculator: one tool, an ``Answer`` output."""


class OpenSpans(SpanProcessor):
    """Tracks spans that started and have not ended."""

    def __init__(self) -> None:
        self.open: dict[int, str] = {}
        self.started = 0

    def on_start(self, span: SdkSpan, parent_context: Context | None = None) -> None:
        self.started += 1
        self.open[span.context.span_id] = span.name

    def on_end(self, span: ReadableSpan) -> None:
        assert span.context is not None
        self.open.pop(span.context.span_id, None)


class Traced:
    """A private SDK provider with an in-memory exporter; never the global provider."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.open_spans = OpenSpans()
        self.provider = TracerProvider()
        self.provider.add_span_processor(self.open_spans)
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    @property
    def spans(self) -> tuple[ReadableSpan, ...]:
        return self.exporter.get_finished_spans()

    def named(self, name: str) -> list[ReadableSpan]:
        return [span for span in self.spans if span.name == name]

    def one(self, name: str) -> ReadableSpan:
        found = self.named(name)
        assert len(found) == 1, f"{len(found)} spans named {name!r}: {self.names()}"
        return found[0]

    def names(self) -> list[str]:
        return [span.name for span in self.spans]


def unset_global_meter_provider(patch: pytest.MonkeyPatch) -> None:
    """Make OpenTelemetry's global meter provider unset again until ``patch`` is undone.

    The global can be set once per process; OpenTelemetry's own test utilities reset it the
    same way.
    """
    patch.setattr(metrics_state, "_METER_PROVIDER", None)
    patch.setattr(metrics_state, "_METER_PROVIDER_SET_ONCE", Once())


class Metered:
    """An SDK meter provider with an in-memory reader, installed as the global one.

    Runs record metrics to the global meter provider only; :meth:`close` puts the unset
    global back.
    """

    def __init__(self) -> None:
        self._patch = pytest.MonkeyPatch()
        unset_global_meter_provider(self._patch)
        self.reader = InMemoryMetricReader()
        self.provider = MeterProvider(metric_readers=[self.reader], shutdown_on_exit=False)
        metrics.set_meter_provider(self.provider)

    def collect(self) -> dict[str, Metric]:
        """Every metric recorded so far (cumulative), by name."""
        data = self.reader.get_metrics_data()
        found: dict[str, Metric] = {}
        if data is None:
            return found
        for resource_metrics in data.resource_metrics:
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    found[metric.name] = metric
        return found

    def points(self, name: str) -> dict[frozenset[tuple[str, Any]], Any]:
        """The data points of metric ``name``, by their attributes."""
        metric = self.collect().get(name)
        if metric is None:
            return {}
        return {frozenset((point.attributes or {}).items()): point
                for point in metric.data.data_points}  # fmt: skip

    def close(self) -> None:
        self.provider.shutdown()
        self._patch.undo()


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return span.context.span_id


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def run_example(
    name: str, timeout: float = 60, *, args: Sequence[str] = (), env: dict[str, str] | None = None
) -> str:
    """Run ``examples/<name>`` as a script; return its standard output (it must exit 0).

    ``args`` follow the script's path; ``env`` adds variables to this process's.
    """
    environ = None if env is None else {**os.environ, **env}
    result = subprocess.run([sys.executable, str(EXAMPLES / name), *args], capture_output=True,
                            text=True, timeout=timeout, check=False, env=environ)  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout


def set_capture(monkeypatch: pytest.MonkeyPatch, on: bool | str) -> None:
    """Turn message-content capture on or off for one test (read when a run starts).

    ``True`` is the historical ``true``; a string is the variable's value (a capture mode).
    """
    if on is False:
        monkeypatch.delenv(CAPTURE_CONTENT_ENV, raising=False)
    else:
        monkeypatch.setenv(CAPTURE_CONTENT_ENV, "true" if on is True else on)


def set_semconv(monkeypatch: pytest.MonkeyPatch, opt_in: str | None) -> None:
    """Set ``OTEL_SEMCONV_STABILITY_OPT_IN`` (``None``: unset) and have runs follow it.

    The choice is made once, at import; this makes it again, and ``monkeypatch`` puts the
    import-time choice back.
    """
    if opt_in is None:
        monkeypatch.delenv(STABILITY_OPT_IN_ENV, raising=False)
    else:
        monkeypatch.setenv(STABILITY_OPT_IN_ENV, opt_in)
    monkeypatch.setattr(_semconv, "_ACTIVE", _semconv.active_semconv())
    refresh_semconv()


class Logged:
    """An SDK logger provider with an in-memory exporter, installed as the global one.

    Events (log records) go to the global logger provider only; :meth:`close` puts the
    unset global back.
    """

    def __init__(self) -> None:
        self._patch = pytest.MonkeyPatch()
        self._patch.setattr(logs_state, "_LOGGER_PROVIDER", None)
        self._patch.setattr(logs_state, "_LOGGER_PROVIDER_SET_ONCE", Once())
        self.exporter = InMemoryLogRecordExporter()
        self.provider = LoggerProvider(shutdown_on_exit=False)
        self.provider.add_log_record_processor(SimpleLogRecordProcessor(self.exporter))
        _logs.set_logger_provider(self.provider)

    def events(self, name: str) -> list[ReadableLogRecord]:
        """The log records emitted as event ``name``, in order."""
        return [record for record in self.exporter.get_finished_logs()
                if record.log_record.event_name == name]  # fmt: skip

    def close(self) -> None:
        self.provider.shutdown()
        self._patch.undo()


class ProcessLines:
    """A child process's standard output (text), read line by line on a thread of its own.

    ``next_line()`` waits for the next line at most ``timeout`` seconds: a bound on a hung
    process, never a synchronisation (the line is what the test waits for).
    """

    def __init__(self, process: subprocess.Popen[str], timeout: float = 60.0):
        assert process.stdout is not None, "start the process with stdout=subprocess.PIPE"
        self.process = process
        self.timeout = timeout
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def next_line(self) -> str:
        """The next line; ``AssertionError`` when the output ends first."""
        line = self._lines.get(timeout=self.timeout)
        assert line is not None, f"the process ended (status {self.process.wait()})"
        return line

    def rest(self) -> list[str]:
        """Every line left, once the process has exited."""
        self.process.wait(self.timeout)
        self._reader.join(self.timeout)
        lines = []
        while (line := self._lines.get(timeout=self.timeout)) is not None:  # to the end mark
            lines.append(line)
        return lines

    def close(self) -> None:
        """Kill the process if it still runs, and close its pipes."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self._reader.join(self.timeout)
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                pipe.close()


class ListedSource:
    """A tool source whose list a test sets (as a server's may change between two runs);
    not ready (not connected) while it lists no tool."""

    source_name = "the test's source"

    def __init__(self, *tools: Tool) -> None:
        self.revision = 0
        self.tools: Sequence[Tool] = ()
        if tools:
            self.lists(*tools)

    def lists(self, *tools: Tool) -> None:
        self.revision += 1
        self.tools = tools

    def current_tools(self) -> tuple[int, Sequence[Tool]]:
        if not self.tools:
            raise SourceNotReadyError(f"{self.source_name} is not connected")
        return self.revision, self.tools
