"""A batch beyond one machine: shards of a batch run as Ray tasks (the ``ray`` extra).

:func:`run_on_ray` splits the inputs into contiguous shards, runs each shard as one Ray
task (a :func:`~subagent.run_many` in the worker's own event loop), and gathers the Steps
in input order. It needs the ``ray`` extra::

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

A shard whose task fails (a crashed worker, an error outside the runs) does not lose the
others: its inputs get failed Steps (``FailReason.ERROR``) naming the error.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import logging
import os
import re
import socket
import threading
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TypedDict, cast, overload

import anyio
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
from subagent._errors import ConfigurationError
from subagent._records import FailReason, Failure, Step, build_step
from subagent._text import shorten
from subagent.batch import run_many
from subagent.llm import LLM, LLMRequest, LLMResponse, Message, RetryPolicy

if TYPE_CHECKING:
    from types import ModuleType

    from opentelemetry.trace import TracerProvider

__all__ = ["FLUSH_TIMEOUT", "RayRunArguments", "run_on_ray"]

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
_logger = logging.getLogger(__name__)


class RayRunArguments(TypedDict, total=False):
    """The run options of :meth:`SubAgent.run` that travel to the workers.

    ``llm`` and ``tracer_provider`` are parameters of :func:`run_on_ray` with their own
    meaning there; ``on_event`` and ``on_text`` are not offered (they would run in the
    workers, out of the caller's sight).
    """

    max_turns: int | None
    return_retries: int | None
    messages: Sequence[Message | Mapping[str, Any]] | str | None
    context_policy: ContextPolicy | None
    settings: Mapping[str, Any] | None
    retry_policy: RetryPolicy | None
    timeout: float | None
    mission_timeout: float | None


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
    one Ray task running :func:`~subagent.run_many` with ``concurrency`` runs in flight, so
    up to ``shards * concurrency`` runs are in flight across the cluster. Ray is started
    (``ray.init()``, which honours ``RAY_ADDRESS``) if the caller has not done it.

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
            ``runtime_env``, ``max_retries``...), passed to ``.options()``.
        **options: The other run options of :meth:`SubAgent.run` (:class:`RayRunArguments`),
            for every run.

    Returns:
        One Step per context, in the order of ``contexts``. The inputs of a shard whose
        task failed get failed Steps (reason ``error``) naming the error.

    Raises:
        ConfigurationError: An argument is invalid (before any task starts).
        ImportError: The ``ray`` extra is not installed.
    """
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
    if task_options is not None and not isinstance(task_options, Mapping):
        raise ConfigurationError("task_options", f"must be a mapping, got {task_options!r}")
    inputs = _check_contexts(contexts)
    if not inputs:
        return []
    if not ray.is_initialized():
        await anyio.to_thread.run_sync(ray.init)
    count = min(shards or _cluster_cpus(ray), len(inputs))
    bounds = _bounds(len(inputs), count)
    step_type = _step_type(definition)
    shared = _Batch(agent, llm, options, concurrency, rerun_retryable, delay)
    tracer = _caller_tracer(tracer_provider)
    span_name = f"run_on_ray {definition.name}"
    attributes: dict[str, AttributeValue] = {
        "gen_ai.agent.name": definition.name,
        "subagent.batch.runs": len(inputs),
        "subagent.batch.shards": count,
        "subagent.batch.concurrency": concurrency,
    }
    scope = (
        tracer.start_as_current_span(span_name, kind=SpanKind.INTERNAL, attributes=attributes)
        if tracer is not None
        else contextlib.nullcontext(trace.INVALID_SPAN)
    )
    with scope as span:
        carrier: dict[str, str] = {}
        propagate.inject(carrier)  # the batch's span, or whatever the caller has current
        steps, errors = await _gather(ray, shared, inputs, bounds, carrier, step_type,
                                      task_options)  # fmt: skip
        failed = sum(1 for step in steps if not step.ok)
        span.set_attributes({
            "subagent.batch.done": len(steps) - failed,
            "subagent.batch.failed": failed,
            "subagent.batch.failed_shards": len(errors),
        })  # fmt: skip
        if errors:
            kinds = sorted({type(error).__name__ for error in errors})
            description = f"{len(errors)} of {count} shards failed: {', '.join(kinds)}"
            span.set_attribute("error.type", kinds[0])
            span.set_status(Status(StatusCode.ERROR, description))
    return steps


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


def _step_type(agent: SubAgent[Any]) -> type[Step[Any]]:
    """The Step model the agent's Steps validate against after their JSON trip."""
    output = agent.output
    if output is None or output is str:
        return Step[str]
    if (
        inspect.isclass(output)
        or typing.get_origin(output) is not None
        or isinstance(output, types.UnionType)
    ):
        return Step[output]  # type: ignore[valid-type]
    return Step[Any]  # a parser: its value comes back as plain JSON data


def _caller_tracer(provider: TracerProvider | None) -> trace.Tracer | None:
    if provider is None:
        provider = trace.get_tracer_provider()
        if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
            return None
    return provider.get_tracer("subagent", __version__)


async def _gather(
    ray: ModuleType,
    shared: _Batch,
    inputs: list[Context],
    bounds: list[tuple[int, int]],
    carrier: dict[str, str],
    step_type: type[Step[Any]],
    task_options: Mapping[str, Any] | None,
) -> tuple[list[Step[Any]], list[BaseException]]:
    remote = _remote_shard(ray)
    if task_options:
        remote = remote.options(**task_options)
    batch_ref = ray.put(shared)
    pending = {
        remote.remote(batch_ref, index, inputs[start:end], carrier): index
        for index, (start, end) in enumerate(bounds)
    }
    steps: list[Step[Any] | None] = [None] * len(inputs)
    errors: list[BaseException] = []
    wait = functools.partial(ray.wait, num_returns=1)
    try:
        while pending:
            ready, _ = await anyio.to_thread.run_sync(wait, list(pending), abandon_on_cancel=True)
            for ref in ready:
                index = pending.pop(ref)
                start, end = bounds[index]
                try:
                    texts = ray.get(ref)
                    steps[start:end] = [step_type.model_validate_json(text) for text in texts]
                except (ray.exceptions.RayError, ValueError) as exc:
                    errors.append(exc)
                    failed = _shard_failed(shared, index, exc)
                    steps[start:end] = [failed] * (end - start)
    finally:
        for ref in pending:  # cancelled, or an unexpected error: stop what still runs
            with contextlib.suppress(Exception):
                ray.cancel(ref)
    return cast("list[Step[Any]]", steps), errors


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


def _shard_failed(shared: _Batch, index: int, exc: BaseException) -> Step[Any]:
    agent = shared.agent if isinstance(shared.agent, SubAgent) else _agent_of(shared.agent)
    max_turns = shared.options.get("max_turns") or agent.max_turns
    return_retries = shared.options.get("return_retries")
    message = shorten(f"shard {index} failed: {_error_text(exc)}", _MESSAGE_LIMIT)
    return build_step(
        agent=agent.name,
        output=None,
        failure=Failure(reason=FailReason.ERROR, message=message),
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
) -> list[str]:
    """One shard, in a Ray worker: ``run_many`` in its own event loop; the Steps as JSON."""
    agent = shared.agent if isinstance(shared.agent, SubAgent) else _agent_of(shared.agent)
    provider = _worker_provider()
    try:
        return anyio.run(_shard, shared, agent, index, contexts, carrier, provider)
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
) -> list[str]:
    token = otel_context.attach(propagate.extract(carrier))
    try:
        async with contextlib.AsyncExitStack() as stack:
            llm = await _worker_llm(shared.llm, stack)
            if provider is None:  # nothing exports here: the runs are not traced either
                steps = await _run(shared, agent, contexts, llm, None)
                return [step.model_dump_json() for step in steps]
            tracer = provider.get_tracer("subagent", __version__)
            attributes: dict[str, AttributeValue] = {
                "gen_ai.agent.name": agent.name,
                "subagent.shard.index": index,
                "subagent.shard.runs": len(contexts),
            }
            with tracer.start_as_current_span(
                f"ray_shard {agent.name}", kind=SpanKind.INTERNAL, attributes=attributes
            ) as span:
                steps = await _run(shared, agent, contexts, llm, provider)
                failed = sum(1 for step in steps if not step.ok)
                span.set_attributes({"subagent.shard.done": len(steps) - failed,
                                     "subagent.shard.failed": failed})  # fmt: skip
                return [step.model_dump_json() for step in steps]
    finally:
        otel_context.detach(token)


async def _run(
    shared: _Batch,
    agent: SubAgent[Any],
    contexts: list[Context],
    llm: LLM | None,
    provider: TracerProvider | None,
) -> list[Step[Any]]:
    return await run_many(agent, contexts, concurrency=shared.concurrency,
                          rerun_retryable=shared.rerun_retryable, rerun_delay=shared.rerun_delay,
                          progress=False, llm=llm, tracer_provider=provider,
                          **shared.options)  # fmt: skip


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
                    resource_attributes={"process.pid": os.getpid(),
                                         "host.name": socket.gethostname()},
                )  # fmt: skip
                _worker_tracing.append(handle)
        handle = _worker_tracing[0]
    return None if handle is None else cast("TracerProvider", handle.provider)
