"""Many runs of one agent: in input order, or as they complete, with bounded concurrency.

A fixed pool of ``concurrency`` workers takes inputs one at a time, so a batch of any size
holds at most ``concurrency`` runs (and as many finished results) in memory at once, and
an input iterable is read lazily. One run's failure never cancels the others: a failed run
is a failed :class:`~subagent.Step`, and a run that raised (a parser bug, a bad input) is
recorded as ``failed(error)`` with the turns it made.

Cancellation: an enclosing cancel scope cancels a batch as any await (``run_many`` then
returns nothing, and the runs under way have no Step). ``batch_timeout`` is the batch's own
deadline, which keeps every Step: the runs under way are stopped (``failed(cancelled)``
with their turns) and the inputs not started get a ``failed(cancelled)`` Step.
"""

from __future__ import annotations

import math
import sys
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sized
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, Self, cast

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from pydantic import BaseModel
from typing_extensions import TypeVar, Unpack

from subagent._agent import RunArguments, SubAgent
from subagent._checks import check_int, check_seconds
from subagent._errors import ConfigurationError
from subagent._handle import AgentRun
from subagent._limits import Ledger, UsageLimits, ledgers_in_scope
from subagent.batch._progress import Progress
from subagent.records import FailReason, Failure, Step
from subagent.records._runs import build_step

__all__ = ["Batch", "BatchItem", "run_many", "stream_many"]

OutputT = TypeVar("OutputT", default=Any)
Context = Mapping[str, Any] | BaseModel | None


@dataclass(frozen=True, slots=True)
class BatchItem(Generic[OutputT]):
    """One input's outcome in a batch.

    Attributes:
        index: The input's position (0-based) in the batch.
        context: The input.
        step: The run's Step (of its last attempt).
        attempts: How many times it ran (more than 1 when a retryable failure was rerun).
    """

    index: int
    context: Any
    step: Step[OutputT]
    attempts: int


async def run_many(
    agent: SubAgent[OutputT],
    contexts: Iterable[Context],
    *,
    concurrency: int = 8,
    rerun_retryable: int = 0,
    rerun_delay: float = 1.0,
    progress: bool | None = None,
    batch_limits: UsageLimits | None = None,
    batch_timeout: float | None = None,
    **options: Unpack[RunArguments],
) -> list[Step[OutputT]]:
    """Run ``agent`` once per context and return the Steps in input order.

    Args:
        agent: The agent.
        contexts: One prompt context per run (mappings or pydantic models), read lazily
            as workers free up (a generator is never read ahead of the runs).
        concurrency: Runs in flight at once (>= 1). Share one model adapter across the
            batch (``llm=``): its connection pool serves all of them.
        rerun_retryable: Run an input again, up to this many times, while its Step is
            ``retryable`` (a transient transport failure).
        rerun_delay: Seconds before the first rerun of an input; doubled for each next one.
        progress: Show a progress bar on standard error: ``None`` (default) when it is a
            terminal.
        batch_limits: What the whole batch may spend: every run charges it (besides its
            own ``usage_limits``). Once a limit is reached, the runs under way end
            ``failed(usage_limit)`` before their next call, and the inputs not started yet
            get a Step ``failed(usage_limit)`` with no turns: none is lost.
        batch_timeout: Seconds the whole batch may take. Then the runs under way are
            stopped and end ``failed(cancelled)`` with the turns they took, the inputs not
            started yet get a Step ``failed(cancelled)`` with no turns, and no run is rerun:
            every input still has its Step. (An enclosing cancel scope, by contrast,
            cancels ``run_many`` as any await: it returns nothing.) Each run then costs a
            cancel scope more, so that it can be stopped.
        **options: The keyword arguments of :meth:`SubAgent.run`, for every run.

    Returns:
        One Step per context, in the order of ``contexts``.

    Raises:
        ConfigurationError: An option is invalid (before any run starts).
    """
    steps: dict[int, Step[OutputT]] = {}
    batch = stream_many(agent, contexts, concurrency=concurrency,
                        rerun_retryable=rerun_retryable, rerun_delay=rerun_delay,
                        progress=progress, batch_limits=batch_limits,
                        batch_timeout=batch_timeout, **options)  # fmt: skip
    async with batch:
        async for item in batch:
            steps[item.index] = item.step
    return [steps[index] for index in range(len(steps))]


def stream_many(
    agent: SubAgent[OutputT],
    contexts: Iterable[Context],
    *,
    concurrency: int = 8,
    rerun_retryable: int = 0,
    rerun_delay: float = 1.0,
    progress: bool | None = None,
    batch_limits: UsageLimits | None = None,
    batch_timeout: float | None = None,
    **options: Unpack[RunArguments],
) -> Batch[OutputT]:
    """Run ``agent`` once per context; yield each outcome as it completes.

    ``async with stream_many(agent, contexts) as batch: async for item in batch: ...``;
    the arguments are :func:`run_many`'s. Leaving the block early cancels the runs still
    going. ``contexts`` is read lazily, as workers free up.

    Raises:
        ConfigurationError: An option is invalid (before any run starts).
    """
    check_int("concurrency", concurrency, 1)
    check_int("rerun_retryable", rerun_retryable, 0)
    delay = check_seconds("rerun_delay", rerun_delay, allow_zero=True)
    timeout = check_seconds("batch_timeout", batch_timeout)
    if progress is not None and not isinstance(progress, bool):
        raise ConfigurationError("progress", f"must be a bool or None, got {progress!r}")
    if batch_limits is not None and not isinstance(batch_limits, UsageLimits):
        raise ConfigurationError(
            "batch_limits", f"must be a UsageLimits or None, got {batch_limits!r}"
        )
    agent.check_options(**options)
    batch = Batch(agent, _check_contexts(contexts), concurrency, rerun_retryable, delay or 0.0,
                  progress, options, timeout)  # fmt: skip
    if batch_limits is not None:
        batch._ledger = Ledger(batch_limits, "the batch")
    return batch


def _check_contexts(contexts: Iterable[Context]) -> Iterable[Context]:
    if isinstance(contexts, str | bytes | Mapping | BaseModel) or not isinstance(
        contexts, Iterable
    ):
        raise ConfigurationError(
            "contexts", f"must be an iterable of contexts, got {type(contexts).__name__}"
        )
    return contexts


class Batch(Generic[OutputT]):
    """A batch under way: an async iterator of :class:`BatchItem`, as runs complete."""

    def __init__(
        self,
        agent: SubAgent[OutputT],
        contexts: Iterable[Context],
        concurrency: int,
        rerun_retryable: int,
        rerun_delay: float,
        progress: bool | None,
        options: RunArguments,
        timeout: float | None = None,
    ):
        self._agent = agent
        self._contexts = contexts
        self._concurrency = concurrency
        self._reruns = rerun_retryable
        self._rerun_delay = rerun_delay
        self._options = options
        total = len(contexts) if isinstance(contexts, Sized) else None
        show = sys.stderr.isatty() if progress is None else progress
        self._progress = Progress(agent.name, total, show)
        self._group: TaskGroup | None = None
        self._receive: MemoryObjectReceiveStream[BatchItem[OutputT]] | None = None
        # The books of the batch's usage limits, charged by every run (batch_limits=).
        self._ledger: Ledger | None = None
        # batch_timeout=: the runs under way (to stop them), why the batch stopped, and
        # the event that ends a wait before a rerun.
        self._timeout = timeout
        self._running: set[AgentRun[OutputT]] | None = set() if timeout is not None else None
        self._stopped: str | None = None
        self._stopping: anyio.Event | None = None

    async def __aenter__(self) -> Self:
        if self._group is not None:
            raise RuntimeError("a Batch can be entered only once")
        # Finished results wait here for the consumer: a slow consumer holds the workers
        # back rather than letting results pile up.
        send, receive = anyio.create_memory_object_stream[BatchItem[OutputT]](self._concurrency)
        self._receive = receive
        group = anyio.create_task_group()
        await group.__aenter__()
        self._group = group
        inputs = enumerate(self._contexts)
        with send:
            for _ in range(self._concurrency):
                group.start_soon(self._work, inputs, send.clone())
        if self._timeout is not None:  # cancelled with the group when the block is left
            self._stopping = anyio.Event()
            group.start_soon(self._deadline, self._timeout, self._stopping)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        assert self._group is not None and self._receive is not None
        try:
            self._group.cancel_scope.cancel()  # runs still going when the block is left
            if exc is not None and not isinstance(exc, anyio.get_cancelled_exc_class()):
                # The block raised: the runs are cancelled, then the block's own exception
                # goes on as it is (as agent.stream() does), not inside an ExceptionGroup.
                await self._group.__aexit__(None, None, None)
                return
            await self._group.__aexit__(exc_type, exc, traceback)
        finally:
            self._receive.close()
            self._progress.close()

    def __aiter__(self) -> AsyncIterator[BatchItem[OutputT]]:
        if self._receive is None:
            raise RuntimeError("use the batch as `async with stream_many(...) as batch:`")
        return self

    async def __anext__(self) -> BatchItem[OutputT]:
        assert self._receive is not None
        try:
            return await self._receive.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def _work(
        self,
        inputs: Iterator[tuple[int, Context]],
        send: MemoryObjectSendStream[BatchItem[OutputT]],
    ) -> None:
        if self._ledger is not None:
            # The worker task's own context: every run it starts charges the batch's ledger.
            ledgers_in_scope().set((self._ledger,))
        with send:
            for index, context in inputs:  # shared by the workers: each takes the next input
                item = await self._run(index, context)
                self._progress.record(item.step)
                await send.send(item)

    async def _deadline(self, timeout: float, stopping: anyio.Event) -> None:
        await anyio.sleep(timeout)
        self._stopped = f"the batch did not finish within batch_timeout={timeout:g} s"
        stopping.set()
        for run in self._running or ():
            run.stop()  # each ends failed(cancelled), its turns kept

    async def _run(self, index: int, context: Context) -> BatchItem[OutputT]:
        attempts = 0
        delay = self._rerun_delay
        while True:
            if self._stopped is not None:  # not started: past the batch's deadline
                message = f"{self._stopped}; the run was not started"
                return BatchItem(index, context, self._unstarted(FailReason.CANCELLED, message), 0)
            reached = None if self._ledger is None else self._ledger.reached()
            if reached is not None:  # not started: the batch's budget is spent
                message = f"usage limit reached before the run started: {reached}"
                step = self._unstarted(FailReason.USAGE_LIMIT, message)
                return BatchItem(index, context, step, attempts)
            attempts += 1
            try:
                step = await self._attempt(context)
            except Exception as exc:  # isolated: recorded, the batch goes on
                step = self._errored(exc)
            if not step.retryable or attempts > self._reruns:
                return BatchItem(index, context, step, attempts)
            if self._stopping is None:
                await anyio.sleep(delay)
            else:
                with anyio.move_on_after(delay):
                    await self._stopping.wait()  # the deadline, met while waiting, ends it
            if self._stopped is not None:  # not run again: its last Step stands
                return BatchItem(index, context, step, attempts)
            delay = min(delay * 2, math.inf)

    async def _attempt(self, context: Context) -> Step[OutputT]:
        running = self._running
        if running is None:
            return await self._agent.run(context, **self._options)
        run = self._agent.start(context, **self._options)  # stoppable, in this task
        running.add(run)
        try:
            return await run.execute()
        finally:
            running.discard(run)

    def _errored(self, exc: Exception) -> Step[OutputT]:
        failure = Failure(reason=FailReason.ERROR, message=f"{type(exc).__name__}: {exc}")
        return self._failed(failure, list(getattr(exc, "turns", ())))

    def _unstarted(self, reason: FailReason, message: str) -> Step[OutputT]:
        return self._failed(Failure(reason=reason, message=message), [])

    def _failed(self, failure: Failure, turns: list[Any]) -> Step[OutputT]:
        agent, options = self._agent, self._options
        max_turns = options.get("max_turns") or agent.max_turns
        return_retries = options.get("return_retries")
        step = build_step(
            agent=agent.name,
            output=None,
            failure=failure,
            turns=turns,
            max_turns=max_turns,
            return_retries=agent.return_retries if return_retries is None else return_retries,
            duration_s=0.0,
        )
        return cast("Step[OutputT]", step)
