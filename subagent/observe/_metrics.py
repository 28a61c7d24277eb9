"""OpenTelemetry metrics of a run: an :class:`~subagent.observe.Observer` on the API only.

The library never installs a meter provider. A run records to the global one once an
application has set it up (``subagent.tracing.configure()`` does); with none (the API's
proxy or no-op provider), :func:`metrics_observer` returns ``None`` and the run pays nothing
for metrics: not a clock read, not a dictionary.

Instruments, after the GenAI semantic conventions where they name one (the version
:mod:`subagent.observe._semconv` chose at import), under ``subagent.`` where they do not:

- token usage of each LLM call, when the server reported it: by default the histogram
  ``gen_ai.client.token.usage`` (``{token}``, by ``gen_ai.token.type``); with the latest
  conventions the counters ``gen_ai.client.inference.usage.input_tokens``,
  ``.output_tokens``, ``.cache_read.input_tokens`` and ``.cache_write.input_tokens``
  (``{token}``, ``gen_ai.token.modality=text``).
- ``gen_ai.client.operation.duration`` (latest: ``gen_ai.client.inference.duration``;
  histogram, ``s``): each LLM call, transport retries included (the ``chat`` span).
- ``gen_ai.invoke_agent.duration`` (latest: ``gen_ai.invocation.duration``, with
  ``gen_ai.invocation.is_nested``; histogram, ``s``): each run (the ``invoke_agent`` span).
- ``gen_ai.execute_tool.duration`` (histogram, ``s``): each tool call (``execute_tool``).
- ``subagent.runs`` (counter, ``{run}``): runs by outcome and failure reason.
- ``subagent.turns`` (counter, ``{turn}``): turns by type, outcome and error class.
- ``subagent.corrections`` (counter, ``{turn}``): correction turns spent (``retry`` turns),
  by outcome.

Attributes are low-cardinality by construction: the agent's name, its tools' names (a
name the model made up is :data:`UNKNOWN_TOOL`), the model and server the adapter was built
for, and classes from closed sets (turn types and outcomes, failure reasons, error classes).
Nothing a server or a model writes: not the model a reply names (``gen_ai.response.model``,
which is on the chat span), no ids, no message content, no error text.
"""

from __future__ import annotations

import os
import time
import weakref
from collections.abc import Container
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final

import anyio
import opentelemetry.metrics._internal as _metrics_state
from opentelemetry import metrics
from opentelemetry.metrics import Counter, Histogram, MeterProvider, NoOpMeterProvider
from opentelemetry.util.types import AttributeValue

from subagent.__about__ import __version__
from subagent._errors import LLMError
from subagent.llm import LLMRequest, LLMResponse, ToolCall, TransportRetry
from subagent.observe._observer import (
    ChatScope,
    Observer,
    RunScope,
    ToolScope,
    TurnScope,
    TurnStart,
)
from subagent.observe._otel import UNKNOWN_PROVIDER, UNKNOWN_TOOL
from subagent.observe._semconv import LATEST, PREVIOUS, SemConv, active_semconv
from subagent.records import Step, ToolResult, Turn, TurnType

__all__ = [
    "AGENT_DURATION",
    "CORRECTIONS",
    "INFERENCE_DURATION",
    "INVOCATION_DURATION",
    "METER_PROVIDER_FROM_ENV",
    "OPERATION_DURATION",
    "RUNS",
    "TOKEN_USAGE",
    "TOOL_DURATION",
    "TURNS",
    "USAGE_CACHE_READ_TOKENS",
    "USAGE_CACHE_WRITE_TOKENS",
    "USAGE_INPUT_TOKENS",
    "USAGE_OUTPUT_TOKENS",
    "MetricsObserver",
    "metrics_observer",
]

TOKEN_USAGE: Final = "gen_ai.client.token.usage"
"""The token usage histogram of the previous conventions (the default)."""
OPERATION_DURATION: Final = PREVIOUS.inference_duration
AGENT_DURATION: Final = PREVIOUS.invocation_duration
INFERENCE_DURATION: Final = LATEST.inference_duration
INVOCATION_DURATION: Final = LATEST.invocation_duration
USAGE_INPUT_TOKENS: Final = "gen_ai.client.inference.usage.input_tokens"
USAGE_OUTPUT_TOKENS: Final = "gen_ai.client.inference.usage.output_tokens"
USAGE_CACHE_READ_TOKENS: Final = "gen_ai.client.inference.usage.cache_read.input_tokens"
USAGE_CACHE_WRITE_TOKENS: Final = "gen_ai.client.inference.usage.cache_write.input_tokens"
TOOL_DURATION: Final = "gen_ai.execute_tool.duration"
RUNS: Final = "subagent.runs"
TURNS: Final = "subagent.turns"
CORRECTIONS: Final = "subagent.corrections"

_METER_NAME = "subagent"
_MODALITY: Final = "text"
"""``gen_ai.token.modality`` of the usage counters: subagent's messages are text only."""

# Bucket boundaries the conventions advise for each histogram.
_TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304,
                  16777216, 67108864)  # fmt: skip
_CALL_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48,
                 40.96, 81.92)  # fmt: skip
_AGENT_BUCKETS = (0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 51.2, 102.4, 204.8, 409.6)


@dataclass(frozen=True, slots=True)
class _Usage:
    """The latest conventions' token usage counters."""

    input_tokens: Counter
    output_tokens: Counter
    cache_read: Counter
    cache_write: Counter


@dataclass(frozen=True, slots=True)
class _Instruments:
    semconv: SemConv
    token_usage: Histogram | None  # the previous conventions
    usage: _Usage | None  # the latest conventions
    operation_duration: Histogram
    agent_duration: Histogram
    tool_duration: Histogram
    runs: Counter
    turns: Counter
    corrections: Counter


def _make_usage(meter: metrics.Meter) -> _Usage:
    def counter(name: str, description: str) -> Counter:
        return meter.create_counter(name, "{token}", description)

    return _Usage(
        input_tokens=counter(USAGE_INPUT_TOKENS,
                             "The number of input (prompt) tokens used, including cached tokens."),
        output_tokens=counter(USAGE_OUTPUT_TOKENS,
                              "The number of output (completion) tokens used."),
        cache_read=counter(USAGE_CACHE_READ_TOKENS,
                           "The number of input tokens served from a provider-managed cache."),
        cache_write=counter(USAGE_CACHE_WRITE_TOKENS,
                            "The number of input tokens written to a provider-managed cache."),
    )  # fmt: skip


def _make_instruments(provider: MeterProvider, semconv: SemConv) -> _Instruments:
    meter = provider.get_meter(_METER_NAME, __version__)
    token_usage = None
    if semconv.token_usage is not None:
        token_usage = meter.create_histogram(
            semconv.token_usage, "{token}", "Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS,
        )  # fmt: skip
    return _Instruments(
        semconv=semconv,
        token_usage=token_usage,
        usage=None if token_usage is not None else _make_usage(meter),
        operation_duration=meter.create_histogram(
            semconv.inference_duration, "s",
            "GenAI client inference operation duration." if semconv.latest
            else "GenAI operation duration.",
            explicit_bucket_boundaries_advisory=_CALL_BUCKETS,
        ),
        agent_duration=meter.create_histogram(
            semconv.invocation_duration, "s",
            "The end-to-end duration of an in-process GenAI agent invocation." if semconv.latest
            else "The end-to-end duration of a single agent invocation.",
            explicit_bucket_boundaries_advisory=_AGENT_BUCKETS,
        ),
        tool_duration=meter.create_histogram(
            TOOL_DURATION, "s", "The duration of a single tool execution.",
            explicit_bucket_boundaries_advisory=_CALL_BUCKETS,
        ),
        runs=meter.create_counter(RUNS, "{run}", "Runs of agents, by outcome."),
        turns=meter.create_counter(TURNS, "{turn}", "Turns of runs, by type and outcome."),
        corrections=meter.create_counter(
            CORRECTIONS, "{turn}", "Correction turns spent (retry turns), by outcome."
        ),
    )  # fmt: skip


_INSTRUMENTS: weakref.WeakKeyDictionary[MeterProvider, _Instruments] = weakref.WeakKeyDictionary()

# The API reads OTEL_PYTHON_METER_PROVIDER from the environment each time no global provider
# is set; a run asks on every start, so that case is read once, at import.
METER_PROVIDER_FROM_ENV: Final = "OTEL_PYTHON_METER_PROVIDER" in os.environ


def _global_meter_provider() -> MeterProvider | None:
    """The global meter provider, or ``None`` when none is configured (cheaply)."""
    if not METER_PROVIDER_FROM_ENV and getattr(_metrics_state, "_METER_PROVIDER", False) is None:
        return None  # the API's own record: nothing set yet
    provider = metrics.get_meter_provider()
    if isinstance(provider, NoOpMeterProvider | _metrics_state._ProxyMeterProvider):
        return None
    return provider


def _instruments_for(provider: MeterProvider | None) -> _Instruments | None:
    if provider is None:
        provider = _global_meter_provider()
        if provider is None:
            return None  # nothing configured: metrics cost nothing
    semconv = active_semconv()
    try:
        instruments = _INSTRUMENTS.get(provider)
    except TypeError:  # a provider that cannot be weakly referenced: not cached
        return _make_instruments(provider, semconv)
    if instruments is None or instruments.semconv is not semconv:  # (or the choice changed)
        instruments = _make_instruments(provider, semconv)
        _INSTRUMENTS[provider] = instruments
    return instruments


def _error_type(exc: BaseException) -> str:
    """The ``error.type`` of an exception that cut a scope short (a class, never a text)."""
    if isinstance(exc, anyio.get_cancelled_exc_class()):
        return "cancelled"
    if isinstance(exc, LLMError):
        return exc.kind.value
    return type(exc).__qualname__


class _Timed:
    """A scope that records its duration when it is left; subclasses say where."""

    __slots__ = ("_attributes", "_started")

    def __init__(self, attributes: dict[str, AttributeValue]):
        self._attributes = attributes
        self._started = 0.0

    def __enter__(self) -> Any:
        self._started = time.perf_counter()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        elapsed = time.perf_counter() - self._started
        if exc is not None:
            self._interrupted(exc)
        self._record(elapsed)

    def _interrupted(self, exc: BaseException) -> None:
        self._attributes.setdefault("error.type", _error_type(exc))

    def _record(self, elapsed: float) -> None:
        raise NotImplementedError


class _RunMeter(_Timed):
    __slots__ = ("_instruments", "_outcome")

    def __init__(self, instruments: _Instruments, attributes: dict[str, AttributeValue]):
        super().__init__(attributes)
        self._instruments = instruments
        self._outcome: dict[str, AttributeValue] | None = None

    def finished(self, step: Step[Any]) -> None:
        agent = self._attributes["gen_ai.agent.name"]
        failure = step.failure
        if failure is None:
            self._outcome = {"gen_ai.agent.name": agent, "subagent.outcome": "done"}
            return
        reason = failure.reason.value
        self._attributes["error.type"] = reason
        self._outcome = {"gen_ai.agent.name": agent, "subagent.outcome": "failed",
                         "subagent.failure.reason": reason}  # fmt: skip

    def _interrupted(self, exc: BaseException) -> None:
        if self._outcome is not None:  # the run had finished; leaving its scope failed
            return
        error = _error_type(exc)
        self._attributes["error.type"] = error
        self._outcome = {
            "gen_ai.agent.name": self._attributes["gen_ai.agent.name"],
            "subagent.outcome": "failed",
            "subagent.failure.reason": "cancelled" if error == "cancelled" else "error",
        }

    def _record(self, elapsed: float) -> None:
        instruments = self._instruments
        instruments.agent_duration.record(elapsed, self._attributes)
        if self._outcome is not None:
            instruments.runs.add(1, self._outcome)


class _TurnMeter:
    """Counts the turn when it ends (or is cut short); turns are not timed."""

    __slots__ = ("_agent", "_counted", "_instruments", "_type")

    def __init__(self, instruments: _Instruments, agent: str, turn_type: TurnType):
        self._instruments = instruments
        self._agent = agent
        self._type = turn_type
        self._counted = False

    def __enter__(self) -> _TurnMeter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc is not None and not self._counted:
            self._count("interrupted", _error_type(exc), False)

    def ended(self, turn: Turn) -> None:
        self._count(turn.outcome.value, turn.error_type, turn.repeated)

    def _count(self, outcome: str, error_type: str | None, repeated: bool) -> None:
        self._counted = True
        attributes: dict[str, AttributeValue] = {
            "gen_ai.agent.name": self._agent,
            "subagent.turn.type": self._type.value,
            "subagent.turn.outcome": outcome,
        }
        if error_type:
            attributes["error.type"] = error_type
        self._instruments.turns.add(1, attributes)
        if self._type is TurnType.RETRY:
            self._instruments.corrections.add(
                1, {"gen_ai.agent.name": self._agent, "subagent.turn.outcome": outcome,
                    "subagent.turn.repeated": repeated}
            )  # fmt: skip


class _ChatMeter(_Timed):
    __slots__ = ("_instruments",)

    def __init__(self, instruments: _Instruments, attributes: dict[str, AttributeValue]):
        super().__init__(attributes)
        self._instruments = instruments

    def retried(self, retry: TransportRetry) -> None:
        return None

    def text(self, piece: str) -> None:
        return None

    def reasoning(self, piece: str) -> None:
        return None

    def replied(self, response: LLMResponse) -> None:
        # Not ``gen_ai.response.model``: the server names whatever it likes there (one series
        # per name, without bound); the chat span carries it.
        attributes = self._attributes
        usage = response.usage
        if not usage.known:
            return  # the conventions: no usage metric when the count is not available
        histogram = self._instruments.token_usage
        if histogram is not None:  # the previous conventions
            histogram.record(usage.input_tokens, {**attributes, "gen_ai.token.type": "input"})
            histogram.record(usage.output_tokens, {**attributes, "gen_ai.token.type": "output"})
            return
        counters = self._instruments.usage
        assert counters is not None
        by_modality = {**attributes, "gen_ai.token.modality": _MODALITY}
        counters.input_tokens.add(usage.input_tokens, by_modality)
        counters.output_tokens.add(usage.output_tokens, by_modality)
        if usage.cache_read_tokens:  # subsets of the input tokens, when reported
            counters.cache_read.add(usage.cache_read_tokens, by_modality)
        if usage.cache_write_tokens:
            counters.cache_write.add(usage.cache_write_tokens, by_modality)

    def _record(self, elapsed: float) -> None:
        self._instruments.operation_duration.record(elapsed, self._attributes)


class _ToolMeter(_Timed):
    __slots__ = ("_instruments",)

    def __init__(self, instruments: _Instruments, attributes: dict[str, AttributeValue]):
        super().__init__(attributes)
        self._instruments = instruments

    def returned(self, result: ToolResult) -> None:
        if not result.ok:
            self._attributes["error.type"] = result.error_type or "tool_error"

    def _record(self, elapsed: float) -> None:
        self._instruments.tool_duration.record(elapsed, self._attributes)


class MetricsObserver(Observer):
    """Metrics of one run. Build it with :func:`metrics_observer`.

    The attributes that stay the same for the whole run are worked out once, here; each
    scope copies them before adding its own.
    """

    __slots__ = ("_agent", "_chat", "_instruments", "_run", "_tool", "_tool_names")

    def __init__(
        self,
        agent: str,
        instruments: _Instruments,
        llm: object,
        tool_names: Container[str] = (),
        nested: bool = False,
    ):
        self._agent = agent
        self._instruments = instruments
        self._tool_names = tool_names
        model = str(getattr(llm, "model_name", None) or "unknown")
        provider = str(getattr(llm, "provider_name", None) or UNKNOWN_PROVIDER)
        chat: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": model,
        }
        address = getattr(llm, "server_address", None)
        if address:
            chat["server.address"] = str(address)
            port = getattr(llm, "server_port", None)
            if isinstance(port, int) and not isinstance(port, bool) and port > 0:
                chat["server.port"] = port
        self._chat = chat
        self._run: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": agent,
            "gen_ai.request.model": model,
        }
        if instruments.semconv.latest:  # required on gen_ai.invocation.duration
            self._run["gen_ai.invocation.is_nested"] = nested
        self._tool: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.agent.name": agent,
            "gen_ai.tool.type": "function",
        }

    def run(
        self,
        max_turns: int,
        return_retries: int,
        phase: str,
        resumed: bool = False,
        first_part: str | None = None,
    ) -> RunScope:
        return _RunMeter(self._instruments, dict(self._run))

    def turn(self, start: TurnStart) -> TurnScope:
        return _TurnMeter(self._instruments, self._agent, start.type)

    def chat(self, request: LLMRequest, llm: object = None) -> ChatScope:
        attributes = dict(self._chat)
        if llm is not None:  # a turn on another model (an escalated correction)
            attributes["gen_ai.request.model"] = str(getattr(llm, "model_name", None) or "unknown")
        return _ChatMeter(self._instruments, attributes)

    def tool(self, call: ToolCall) -> ToolScope:
        name = call.name if call.name in self._tool_names else UNKNOWN_TOOL
        return _ToolMeter(self._instruments, {**self._tool, "gen_ai.tool.name": name})


def metrics_observer(
    agent: str,
    llm: object,
    tool_names: Container[str] = (),
    meter_provider: MeterProvider | None = None,
    nested: bool = False,
) -> MetricsObserver | None:
    """The run's metrics observer, or ``None`` when no meter provider is configured.

    Args:
        agent: The agent's name (``gen_ai.agent.name``).
        llm: The model client, read for its model, provider and server attributes.
        tool_names: The agent's tools. A call naming any other tool is recorded as
            :data:`~subagent.observe.UNKNOWN_TOOL` (the model's text never becomes an
            attribute value).
        meter_provider: The provider to record to; ``None`` for the global one.
        nested: Whether the run is nested in another run in this process (an agent used
            as a tool): ``gen_ai.invocation.is_nested`` under the latest conventions.
    """
    if (
        meter_provider is None
        and not METER_PROVIDER_FROM_ENV
        and _metrics_state._METER_PROVIDER is None
    ):
        return None  # the common case, first: no provider was ever set, nothing to record
    instruments = _instruments_for(meter_provider)
    if instruments is None:
        return None
    return MetricsObserver(agent, instruments, llm, tool_names, nested)
