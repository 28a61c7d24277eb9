"""A batch beyond one machine: shards of a batch run as Ray tasks (the ``ray`` extra).

:func:`run_on_ray` splits the inputs into contiguous shards, runs each shard as one Ray
task (a :func:`~subagent.stream_many` in the worker's own event loop, each Step sent back
as it finishes, through a Ray streaming generator), and gathers the Steps in input order;
:func:`stream_on_ray` yields them as they arrive. It needs the ``ray`` extra::

    pip install 'subagent-runtime[ray]'

Ray is imported on first use, never by the rest of the library. What crosses the process
boundary:

- **The agent**, best as a ``"module:attribute"`` reference that every worker imports
  (the code is installed on the cluster, or shipped with Ray's ``runtime_env``); a
  :class:`~subagent.SubAgent` object is pickled instead (cloudpickle), which works for
  plain definitions.
- **The model**: the agent's own, a picklable adapter, or a ``"module:attribute"``
  reference to an adapter or to a factory called once per shard (an ``OpenAIChat`` holds
  a connection pool and does not pickle: ``llm="subagent:OpenAIChat.from_env"``).
- **The Steps come back as JSON** and are validated against the agent's output type.
- **The trace context**: the caller's W3C trace context is injected into every task and
  extracted in the worker, so each shard's span, and its runs under it, are children of
  the batch's span: one batch, one trace. Workers export through their own SDK provider,
  set up from their standard ``OTEL_*`` variables and flushed before each task returns.

A worker that dies mid-shard loses only the runs whose Steps had not come back: those are
sent again as a new task (as often as the task option ``max_retries`` says, Ray's default
3), or get failed Steps (``FailReason.WORKER_LOST``, retryable) once that is spent. A shard
that raises outside its runs gets failed Steps (``FailReason.ERROR``) for its unfinished
inputs; its finished ones, and the other shards, are kept.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import logging
import os
import queue
import re
import socket
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Generic, Self, TypedDict, cast, overload

import anyio
import anyio.from_thread
import anyio.to_thread
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue
from pydantic import BaseModel
from typing_extensions import TypeVar, Unpack

from subagent.__about__ import __version__
from subagent._agent import SubAgent
from subagent._checks import check_int, check_seconds
from subagent._conversation import ContextPolicy
from subagent._correction import Correction
from subagent._errors import ConfigurationError
from subagent._limits import UsageLimits
from subagent._options import refuse_untaken
from subagent._text import shorten
from subagent.batch import BatchItem, stream_many
from subagent.llm import LLM, LLMRequest, LLMResponse, Message, RetryPolicy
from subagent.records import FailReason, Failure, Step
from subagent.records._runs import build_step, step_model

if TYPE_CHECKING:
    from types import ModuleType, TracebackType

    from opentelemetry.trace import TracerProvider

__all__ = [
    "RayBatch",
    "RayRunArguments",
    "run_on_ray",
    "stream_on_ray",
]

OutputT = TypeVar("OutputT", default=Any)
Context = Mapping[str, Any] | BaseModel | None

FLUSH_TIMEOUT: Final = 10.0
"""Seconds a worker spends, at most, exporting a shard's spans before its task returns."""

_MISSING_RAY = (
    "subagent.ray needs Ray, which comes with the `ray` extra: pip install 'subagent-runtime[ray]'"
)
_ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_MESSAGE_LIMIT = 1_000
_RAY_MAX_RETRIES = 3  # Ray's own default for tasks
_logger = logging.getLogger(__name__)


class RayRunArguments(TypedDict, total=False):
    """The run options of :meth:`SubAgent.run` that travel to the workers.

    ``llm`` and ``tracer_provider`` are parameters of :func:`run_on_ray` with their own
    meaning there; ``on_event``, ``on_text`` and ``on_state`` are not offered (they would
    run in the workers, out of the caller's sight). ``deps`` are pickled to the workers with
    the batch: every run of it gets a copy; ``usage_limits`` are per run (a whole batch's
    ``batch_limits`` are not offered on Ray: the shards keep no shared books). What is
    taken and why the others are not is the table of run options
    (``subagent._options.RUN_OPTION_RULES``), which a test checks this against.
    """

    max_turns: int | None
    return_retries: int | None
    messages: Sequence[Message | Mapping[str, Any]] | str | None
    message_history: Sequence[Message | Mapping[str, Any]] | None
    context_policy: ContextPolicy | None
    settings: Mapping[str, Any] | None
    retry_policy: RetryPolicy | None
    timeout: float | None
    mission_timeout: float | None
    deps: Any
    usage_limits: UsageLimits | None
    correction: Correction | None


@dataclass(frozen=True, slots=True)
class _Batch:
    """What every shard of a batch shares (put in Ray's object store once)."""

    agent: SubAgent[Any] | str
    llm: LLM | str | None
    options: RayRunArguments
    concurrency: int
    rerun_retryable: int
    rerun_delay: float


@overload
async def run_on_ray(
    agent: SubAgent[OutputT],
    contexts: Iterable[Context],
    *,
    shards: int | None = None,
    concurrency: int = 8,
    rerun_retryable: int = 0,
    rerun_delay: float = 1.0,
    llm: LLM | str | None = None,
    tracer_provider: TracerProvider | None = None,
    task_options: Mapping[str, Any] | None = None,
    **options: Unpack[RayRunArguments],
) -> list[Step[OutputT]]: ...


@overload
async def run_on_ray(
    agent: str,
    contexts: Iterable[Context],
    *,
    shards: int | None = None,
    concurrency: int = 8,
    rerun_retryable: int = 0,
    rerun_delay: float = 1.0,
    llm: LLM | str | None = None,
    tracer_provider: TracerProvider | None = None,
    task_options: Mapping[str, Any] | None = None,
    **options: Unpack[RayRunArguments],
) -> list[Step[Any]]: ...


async def run_on_ray(
    agent: SubAgent[Any] | str,
    contexts: Iterable[Context],
    *,
    shards: int | None = None,
    concurrency: int = 8,
    rerun_retryable: int = 0,
    rerun_delay: float = 1.0,
    llm: LLM | str | None = None,
    tracer_provider: TracerProvider | None = None,
    task_options: Mapping[str, Any] | None = None,
    **options: Unpack[RayRunArguments],
) -> list[Step[Any]]:
    """Run ``agent`` once per context on Ray, in shards; return the Steps in input order.

    The inputs are split into ``shards`` contiguous shards of near-equal size; each shard is
    one Ray task running :func:`~subagent.stream_many` with ``concurrency`` runs in flight,
    so up to ``shards * concurrency`` runs are in flight across the cluster. Each Step is
    sent back as its run finishes (a Ray streaming generator), so a worker that dies
    mid-shard loses only the runs that had not finished. Ray is started (``ray.init()``,
    which honours ``RAY_ADDRESS``) if the caller has not done it.

    Args:
        agent: The agent: a ``"module:attribute"`` reference, imported here (to check the
            options and type the Steps) and in every worker, or a :class:`SubAgent`, pickled
            to the workers.
        contexts: One prompt context per run (mappings or pydantic models; they are
            pickled to the workers).
        shards: How many tasks to split the batch into (>= 1; at most one per input).
            Default: the cluster's CPU count.
        concurrency: Runs in flight at once in each shard (>= 1).
        rerun_retryable: Run an input again, up to this many times, while its Step is
            ``retryable`` (in its shard, as :func:`~subagent.run_many` does).
        rerun_delay: Seconds before the first rerun of an input; doubled for each next one.
        llm: The model for every run, instead of the agent's own: an adapter that pickles,
            or a ``"module:attribute"`` reference to an adapter, or to a class or function
            that makes one (called once per shard; an adapter it makes is opened and
            closed around the shard when it is an async context manager).
        tracer_provider: The provider of the batch's span in this process (default: the
            global one). Workers export through their own provider.
        task_options: Ray options for each shard's task (``num_cpus``, ``resources``,
            ``runtime_env``...), passed to ``.options()``. ``max_retries`` (an int >= -1,
            Ray's default 3, -1 without end) is how many times the unfinished inputs of a
            shard whose worker died are sent again as a new task; Ray itself never reruns
            a shard (that would run its finished inputs twice). ``retry_exceptions`` is
            refused: a shard that raises is not sent again.
        **options: The other run options of :meth:`SubAgent.run` (:class:`RayRunArguments`),
            for every run.

    Returns:
        One Step per context, in the order of ``contexts``. Inputs whose worker died and
        that were not sent again get failed Steps (``worker_lost``, retryable); the
        unfinished inputs of a shard that raised get failed Steps (``error``) naming the
        error.

    Raises:
        ConfigurationError: An argument is invalid (before any task starts).
        ImportError: The ``ray`` extra is not installed.
    """
    batch = stream_on_ray(agent, contexts, shards=shards, concurrency=concurrency,
                          rerun_retryable=rerun_retryable, rerun_delay=rerun_delay, llm=llm,
                          tracer_provider=tracer_provider, task_options=task_options,
                          **options)  # fmt: skip
    steps: list[Step[Any] | None] = [None] * len(batch.contexts)
    async with batch:
        async for item in batch:
            steps[item.index] = item.step
    return cast("list[Step[Any]]", steps)


@overload
def stream_on_ray(
    agent: SubAgent[OutputT],
    contexts: Iterable[Context],
    *,
    shards: int | None = None,
    concurrency: int = 8,
    rerun_retryable: int = 0,
    rerun_delay: float = 1.0,
    llm: LLM | str | None = None,
    tracer_provider: TracerProvider | None = None,
    task_options: Mapping[str, Any] | None = None,
    **options: Unpack[RayRunArguments],
) -> RayBatch[OutputT]: ...


@overload
def stream_on_ray(
    agent: str,
    contexts: Iterable[Context],
    *,
    shards: int | None = None,
    concurrency: int = 8,
    rerun_retryable: int = 0,
    rerun_delay: float = 1.0,
    llm: LLM | str | None = None,
    tracer_provider: TracerProvider | None = None,
    task_options: Mapping[str, Any] | None = None,
    **options: Unpack[RayRunArguments],
) -> RayBatch[Any]: ...


def stream_on_ray(
    agent: SubAgent[Any] | str,
    contexts: Iterable[Context],
    *,
    shards: int | None = None,
    concurrency: int = 8,
    rerun_retryable: int = 0,
    rerun_delay: float = 1.0,
    llm: LLM | str | None = None,
    tracer_provider: TracerProvider | None = None,
    task_options: Mapping[str, Any] | None = None,
    **options: Unpack[RayRunArguments],
) -> RayBatch[Any]:
    """:func:`run_on_ray`, yielding each input's outcome as its Step arrives.

    ``async with stream_on_ray(agent, contexts) as batch: async for item in batch: ...``;
    the arguments are :func:`run_on_ray`'s, and each item is a :class:`~subagent.BatchItem`
    (``index``, ``context``, ``step``, ``attempts``, as :func:`~subagent.stream_many`
    yields them), in the order the Steps arrive. Leaving the block early cancels the
    shards still running.

    Raises:
        ConfigurationError: An argument is invalid (before any task starts).
        ImportError: The ``ray`` extra is not installed.
    """
    refuse_untaken("ray", "a Ray batch", options)  # before Ray is even imported
    ray = _import_ray()
    definition = _agent_of(agent)
    check_int("concurrency", concurrency, 1)
    check_int("rerun_retryable", rerun_retryable, 0)
    delay = check_seconds("rerun_delay", rerun_delay, allow_zero=True) or 0.0
    if shards is not None:
        check_int("shards", shards, 1)
    checked: LLM | None
    if isinstance(llm, str):
        _resolve("llm", llm)  # a typo fails here, not in every worker
        checked = _MadeInTheWorker()
    else:
        checked = llm
    definition.check_options(**options, llm=checked)
    ray_options, resubmits = _task_options(task_options)
    inputs = _check_contexts(contexts)
    shared = _Batch(agent, llm, options, concurrency, rerun_retryable, delay)
    return RayBatch(ray, definition, shared, inputs, shards, ray_options, resubmits,
                    _caller_tracer(tracer_provider))  # fmt: skip


@dataclass(slots=True)
class _Task:
    """One submission of (part of) a shard: which inputs it runs, which came back."""

    shard: int
    positions: list[int]  # the batch indices of its inputs, in the order sent
    resubmits: int  # how many more times its unfinished inputs may be sent again (-1: no end)
    received: set[int] = field(default_factory=set)  # positions in ``positions`` returned

    def unfinished(self) -> list[int]:
        return [index for local, index in enumerate(self.positions) if local not in self.received]


class RayBatch(Generic[OutputT]):
    """A batch under way on Ray: an async iterator of :class:`~subagent.BatchItem`.

    Made by :func:`stream_on_ray`; used as ``async with batch: async for item in batch``.
    """

    def __init__(
        self,
        ray: ModuleType,
        agent: SubAgent[Any],
        shared: _Batch,
        contexts: list[Context],
        shards: int | None,
        task_options: dict[str, Any],
        resubmits: int,
        tracer: trace.Tracer | None,
    ):
        self._ray = ray
        self._agent = agent
        self._shared = shared
        self.contexts: Final = contexts
        """The inputs, in order (an item's ``index`` is its position here)."""
        self._shards = shards
        self._task_options = task_options
        self._resubmits = resubmits
        self._tracer = tracer
        self._step_type = step_model(agent.output)
        self._pending: dict[Any, _Task] = {}  # ObjectRefGenerator -> what it runs
        self._errors: list[BaseException] = []
        self._span: trace.Span = trace.INVALID_SPAN
        self._carrier: dict[str, str] = {}
        self._entered = False
        self._count = 0
        self._done = 0
        self._failed = 0
        self._paused = 0
        self._batch_ref: Any = None
        self._remote: Any = None

    async def __aenter__(self) -> Self:
        if self._entered:
            raise RuntimeError("a RayBatch can be entered only once")
        self._entered = True
        if not self.contexts:
            return self
        ray = self._ray
        if not ray.is_initialized():
            await anyio.to_thread.run_sync(ray.init)
        self._count = min(self._shards or _cluster_cpus(ray), len(self.contexts))
        if self._tracer is not None:
            self._span = self._tracer.start_span(
                f"run_on_ray {self._agent.name}",
                kind=SpanKind.INTERNAL,
                attributes={
                    "gen_ai.agent.name": self._agent.name,
                    "subagent.batch.runs": len(self.contexts),
                    "subagent.batch.shards": self._count,
                    "subagent.batch.concurrency": self._shared.concurrency,
                },
            )
            propagate.inject(self._carrier, context=trace.set_span_in_context(self._span))
        else:  # whatever the caller has current travels on
            propagate.inject(self._carrier)
        self._remote = _remote_shard(ray).options(num_returns="streaming", **self._task_options)
        self._batch_ref = ray.put(self._shared)
        for index, (start, end) in enumerate(_bounds(len(self.contexts), self._count)):
            self._submit(_Task(index, list(range(start, end)), self._resubmits))
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        for generator in self._pending:  # left early, or an error: stop what still runs
            with contextlib.suppress(Exception):
                self._ray.cancel(generator)
        self._pending.clear()
        if self._span is trace.INVALID_SPAN:
            return
        self._span.set_attributes({
            "subagent.batch.done": self._done,
            "subagent.batch.failed": self._failed,
            "subagent.batch.paused": self._paused,
            "subagent.batch.failed_shards": len(self._errors),
        })  # fmt: skip
        if exc is not None:  # the caller's code, or a cancellation, ended the batch early
            self._span.set_attribute("error.type", type(exc).__name__)
            self._span.set_status(Status(StatusCode.ERROR, f"left early: {type(exc).__name__}"))
        elif self._errors:
            kinds = sorted({type(error).__name__ for error in self._errors})
            description = f"{len(self._errors)} shard tasks failed: {', '.join(kinds)}"
            self._span.set_attribute("error.type", kinds[0])
            self._span.set_status(Status(StatusCode.ERROR, description))
        self._span.end()

    def __aiter__(self) -> AsyncIterator[BatchItem[OutputT]]:
        if not self._entered:
            raise RuntimeError("use the batch as `async with stream_on_ray(...) as batch`")
        return self._items()

    def _submit(self, task: _Task) -> None:
        contexts = [self.contexts[index] for index in task.positions]
        generator = self._remote.remote(self._batch_ref, task.shard, contexts, self._carrier)
        self._pending[generator] = task

    async def _items(self) -> AsyncIterator[BatchItem[OutputT]]:
        ray = self._ray
        wait = functools.partial(ray.wait, num_returns=1)
        while self._pending:
            ready, _ = await anyio.to_thread.run_sync(wait, list(self._pending),
                                                      abandon_on_cancel=True)  # fmt: skip
            for generator in ready:
                task = self._pending[generator]
                try:
                    ref = next(generator)
                except StopIteration:  # the shard ended, every Step sent
                    del self._pending[generator]
                    for item in self._ended(task, None):
                        yield item
                    continue
                try:
                    local, text, attempts = ray.get(ref)
                except ray.exceptions.RayError as exc:  # the task's end, or a Step lost
                    del self._pending[generator]
                    with contextlib.suppress(Exception):
                        ray.cancel(generator)  # whatever it still runs is run again or failed
                    for item in self._ended(task, exc):
                        yield item
                    continue
                task.received.add(local)
                try:
                    step = self._step_type.model_validate_json(text)
                except ValueError as exc:  # this input's Step only: the shard goes on
                    text = f"shard {task.shard} sent a Step that does not validate: "
                    step = _failed_step(self._shared, FailReason.ERROR, text + _error_text(exc))
                    attempts = 0
                yield self._item(task.positions[local], step, attempts)

    def _item(self, index: int, step: Step[Any], attempts: int) -> BatchItem[OutputT]:
        if step.ok:
            self._done += 1
        elif step.paused:
            self._paused += 1
        else:
            self._failed += 1
        return BatchItem(index, self.contexts[index], step, attempts)

    def _ended(self, task: _Task, exc: BaseException | None) -> list[BatchItem[OutputT]]:
        """A task ended: its inputs that never came back are sent again or failed."""
        unfinished = task.unfinished()
        if exc is None and not unfinished:
            return []
        if exc is None:  # cannot happen with a well-behaved worker; never lose an input
            exc = RuntimeError("the shard ended without sending every Step")
        self._errors.append(exc)
        ray = self._ray
        lost = isinstance(exc, ray.exceptions.RayError) and not isinstance(
            exc, ray.exceptions.RayTaskError | ray.exceptions.TaskCancelledError
        )
        if lost and task.resubmits != 0:
            _logger.warning("subagent.ray: shard %d lost its worker (%s); sending its %d "
                            "unfinished inputs again", task.shard, _error_text(exc),
                            len(unfinished))  # fmt: skip
            left = task.resubmits - 1 if task.resubmits > 0 else -1
            self._submit(_Task(task.shard, unfinished, left))
            return []
        if lost:
            reason = FailReason.WORKER_LOST
            text = f"shard {task.shard} lost its worker before this run finished: "
        else:
            reason = FailReason.ERROR
            text = f"shard {task.shard} failed: "
        failed = _failed_step(self._shared, reason, text + _error_text(exc))
        return [self._item(index, failed, 0) for index in unfinished]


def _task_options(options: Mapping[str, Any] | None) -> tuple[dict[str, Any], int]:
    """Ray's options for the shard tasks, and how often a lost shard is sent again."""
    if options is None:
        options = {}
    if not isinstance(options, Mapping):
        raise ConfigurationError("task_options", f"must be a mapping, got {options!r}")
    chosen = dict(options)
    if chosen.pop("retry_exceptions", None) not in (None, False):
        raise ConfigurationError("task_options", "retry_exceptions is not supported: a shard "
                                 "that raises is not sent again (its runs' own failures are "
                                 "Steps; see rerun_retryable)")  # fmt: skip
    if "num_returns" in chosen:
        raise ConfigurationError("task_options", "num_returns is not supported: a shard's "
                                 "task sends one Step per run (a streaming generator)")  # fmt: skip
    resubmits = chosen.pop("max_retries", _RAY_MAX_RETRIES)
    check_int("task_options max_retries", resubmits, -1)
    chosen["max_retries"] = 0  # never Ray's rerun of a whole shard: only its unfinished inputs
    return chosen, resubmits


# --- the caller's side ---


def _import_ray() -> ModuleType:
    try:
        import ray
    except ImportError as exc:
        raise ImportError(_MISSING_RAY) from exc
    return ray


class _MadeInTheWorker:
    """Stands for a model given by reference when the caller checks the run options."""

    async def complete(self, request: LLMRequest) -> LLMResponse:
        raise NotImplementedError("the model is made in each worker")


def _agent_of(agent: SubAgent[Any] | str) -> SubAgent[Any]:
    if isinstance(agent, str):
        agent = _resolve("agent", agent)
    if not isinstance(agent, SubAgent):
        raise ConfigurationError("agent", f"must be a SubAgent or 'module:attribute' naming one, "
                                          f"got {agent!r}")  # fmt: skip
    return agent


def _check_contexts(contexts: Iterable[Context]) -> list[Context]:
    if isinstance(contexts, str | bytes | Mapping | BaseModel) or not isinstance(
        contexts, Iterable
    ):
        raise ConfigurationError(
            "contexts", f"must be an iterable of contexts, got {type(contexts).__name__}"
        )
    return list(contexts)


def _cluster_cpus(ray: ModuleType) -> int:
    return max(1, int(ray.cluster_resources().get("CPU", 1)))


def _bounds(total: int, count: int) -> list[tuple[int, int]]:
    """``count`` contiguous ``[start, end)`` ranges over ``total`` items, sizes within 1."""
    size, extra = divmod(total, count)
    bounds, start = [], 0
    for index in range(count):
        end = start + size + (1 if index < extra else 0)
        bounds.append((start, end))
        start = end
    return bounds


def _caller_tracer(provider: TracerProvider | None) -> trace.Tracer | None:
    if provider is None:
        provider = trace.get_tracer_provider()
        if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
            return None
    return provider.get_tracer("subagent", __version__)


def _leaf(exc: BaseException) -> BaseException:
    """The one exception inside nested single-exception groups (a task group's wrapping)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _error_text(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None)
    exc = _leaf(cause if isinstance(cause, BaseException) else exc)
    lines = _ANSI.sub("", str(exc)).strip().splitlines()
    text = lines[-1] if lines else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _failed_step(shared: _Batch, reason: FailReason, text: str) -> Step[Any]:
    """The Step of an input whose run never came back (or came back unreadable)."""
    agent = shared.agent if isinstance(shared.agent, SubAgent) else _agent_of(shared.agent)
    max_turns = shared.options.get("max_turns") or agent.max_turns
    return_retries = shared.options.get("return_retries")
    return build_step(
        agent=agent.name,
        output=None,
        failure=Failure(reason=reason, message=shorten(text, _MESSAGE_LIMIT)),
        turns=[],
        max_turns=max_turns,
        return_retries=agent.return_retries if return_retries is None else return_retries,
        duration_s=0.0,
    )


_REMOTE: dict[int, Any] = {}


def _remote_shard(ray: ModuleType) -> Any:
    """:func:`_run_shard` as a Ray remote function (made once per Ray module)."""
    remote = _REMOTE.get(id(ray))
    if remote is None:
        remote = _REMOTE[id(ray)] = ray.remote(_run_shard)
    return remote


# --- the worker's side ---


def _run_shard(
    shared: _Batch, index: int, contexts: list[Context], carrier: dict[str, str]
) -> Iterator[tuple[int, str, int]]:
    """One shard, in a Ray worker: each run's Step as JSON, as it finishes.

    A Ray streaming generator: ``(position in the shard, Step JSON, attempts)`` for each
    input, in the order the runs finish. The runs go on in an event loop of their own (a
    thread of this worker) while this generator hands their Steps to Ray, so a Step is on
    its way to the caller as soon as its run is over. Closing the generator (the task
    cancelled) cancels the runs.
    """
    agent = shared.agent if isinstance(shared.agent, SubAgent) else _agent_of(shared.agent)
    provider = _worker_provider()
    finished: queue.SimpleQueue[tuple[int, str, int] | None] = queue.SimpleQueue()
    try:
        with anyio.from_thread.start_blocking_portal() as portal:
            future = portal.start_task_soon(_shard, shared, agent, index, contexts, carrier,
                                            provider, finished.put)  # fmt: skip
            future.add_done_callback(lambda _: finished.put(None))
            try:
                while (item := finished.get()) is not None:
                    yield item
            finally:
                future.cancel()  # left early: stop the runs (a no-op once they are over)
            error = None if future.cancelled() else future.exception()
            if error is not None:
                raise error
    except BaseExceptionGroup as group:  # what ended the shard, not the task group around it
        leaf = _leaf(group)
        if leaf is group:
            raise
        raise leaf from None
    finally:
        flush = getattr(provider, "force_flush", None)
        if flush is not None:
            flush(int(FLUSH_TIMEOUT * 1000))


async def _shard(
    shared: _Batch,
    agent: SubAgent[Any],
    index: int,
    contexts: list[Context],
    carrier: dict[str, str],
    provider: TracerProvider | None,
    emit: Callable[[tuple[int, str, int]], None],
) -> None:
    token = otel_context.attach(propagate.extract(carrier))
    try:
        async with contextlib.AsyncExitStack() as stack:
            llm = await _worker_llm(shared.llm, stack)
            if provider is None:  # nothing exports here: the runs are not traced either
                await _run(shared, agent, contexts, llm, None, emit)
                return
            tracer = provider.get_tracer("subagent", __version__)
            attributes: dict[str, AttributeValue] = {
                "gen_ai.agent.name": agent.name,
                "subagent.shard.index": index,
                "subagent.shard.runs": len(contexts),
            }
            with tracer.start_as_current_span(
                f"ray_shard {agent.name}", kind=SpanKind.INTERNAL, attributes=attributes
            ) as span:
                done, failed = await _run(shared, agent, contexts, llm, provider, emit)
                span.set_attributes({"subagent.shard.done": done,
                                     "subagent.shard.failed": failed})  # fmt: skip
    finally:
        otel_context.detach(token)


async def _run(
    shared: _Batch,
    agent: SubAgent[Any],
    contexts: list[Context],
    llm: LLM | None,
    provider: TracerProvider | None,
    emit: Callable[[tuple[int, str, int]], None],
) -> tuple[int, int]:
    """The shard's runs; each Step emitted as it finishes. Returns (done, failed)."""
    done = failed = 0
    async with stream_many(agent, contexts, concurrency=shared.concurrency,
                           rerun_retryable=shared.rerun_retryable,
                           rerun_delay=shared.rerun_delay, progress=False, llm=llm,
                           tracer_provider=provider, **shared.options) as batch:  # fmt: skip
        async for item in batch:
            emit((item.index, item.step.model_dump_json(), item.attempts))
            if item.step.ok:
                done += 1
            elif not item.step.paused:
                failed += 1
    return done, failed


async def _worker_llm(llm: LLM | str | None, stack: contextlib.AsyncExitStack) -> LLM | None:
    """The shard's model: as given, or from a reference (a factory is called, and opened)."""
    if not isinstance(llm, str):
        return llm
    found = _resolve("llm", llm)
    if not inspect.isclass(found) and inspect.iscoroutinefunction(getattr(found, "complete", None)):
        return cast(LLM, found)  # an adapter: shared by the shards this worker runs
    if not callable(found):
        raise ConfigurationError("llm", f"{llm!r} is neither an LLM nor a callable making one")
    made = found()
    if hasattr(made, "__aenter__") and hasattr(made, "__aexit__"):
        made = await stack.enter_async_context(made)
    return cast(LLM, made)


@functools.lru_cache(maxsize=64)
def _resolve(name: str, reference: str) -> Any:
    """The object a ``"module:attribute"`` reference names (the attribute may be dotted)."""
    module_name, colon, path = reference.partition(":")
    if not colon or not module_name or not path:
        raise ConfigurationError(name, f"must be 'module:attribute', got {reference!r}")
    try:
        found: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(name, f"cannot import {module_name!r}: {exc}") from exc
    for attribute in path.split("."):
        try:
            found = getattr(found, attribute)
        except AttributeError:
            raise ConfigurationError(name, f"{reference!r}: no attribute {attribute!r}") from None
    return found


_worker_lock = threading.Lock()
_worker_tracing: list[Any] = []  # the worker's subagent.tracing handle, once configured


def _worker_provider() -> TracerProvider | None:
    """The provider this worker exports through, or ``None`` when nothing exports.

    A global SDK provider the application installed in the worker (a Ray
    ``worker_process_setup_hook``) is used as is. Otherwise, when the worker's environment
    names an OTLP endpoint, one provider per worker process is set up from the standard
    ``OTEL_*`` variables (not installed globally); it is flushed after each shard.
    """
    current = trace.get_tracer_provider()
    if not isinstance(current, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return current
    if not any(os.environ.get(name, "").strip() for name in _ENDPOINT_VARIABLES):
        return None
    with _worker_lock:
        if not _worker_tracing:
            try:
                from subagent import tracing
            except ImportError as exc:
                _logger.warning("subagent.ray: the worker's runs are not traced: %s", exc)
                _worker_tracing.append(None)
            else:
                handle = tracing.configure(
                    set_global=False,
                    console=False,
                    metrics=False,  # runs record metrics to a global meter provider only
                    resource_attributes={"process.pid": os.getpid(),
                                         "host.name": socket.gethostname()},
                )  # fmt: skip
                _worker_tracing.append(handle)
        handle = _worker_tracing[0]
    return None if handle is None else cast("TracerProvider", handle.provider)
