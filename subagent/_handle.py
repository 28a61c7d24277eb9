"""A run under way, to watch and to stop: what ``SubAgent.start()`` and ``stream()`` return.

The run lives as long as the ``async with`` block: it runs in a task of the block's own
task group, so it is cancelled with the block's enclosing scope as any child task is.
Leaving the block before the run finished stops it; :meth:`AgentRun.stop` stops it from
inside the block. A stopped run ends ``failed(cancelled)`` and still has its
:class:`~subagent.Step`, with every turn taken so far. :meth:`AgentRun.stream_output`
reads a typed output from the stream as it forms (in the consumer's task).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any, Generic, Literal, Self, cast, overload

import anyio
from anyio.abc import TaskGroup
from typing_extensions import TypeVar

from subagent._parts import AgentParts, RunOptions, Systems
from subagent._run import execute_run
from subagent.llm import Message
from subagent.observe import PartialOutput, RunEvent
from subagent.observe._partial import PartialOutputReader, partial_output_reader
from subagent.observe._stream import EventQueue
from subagent.records import Step

__all__ = ["AgentRun"]

OutputT = TypeVar("OutputT", default=Any)


class AgentRun(Generic[OutputT]):
    """A run under way: ``async with agent.start(...) as run:`` or ``agent.stream(...)``.

    Inside the block, :meth:`stop` ends the run early and ``await run.result()`` waits for
    its :class:`~subagent.Step`; a run from ``stream()`` is also an async iterator of its
    events (``async for event in run``), ending after ``RunEnded``. The run never waits for
    its events to be read: ``result()`` works whether or not anyone iterates. Breaking out
    of the iteration does not stop the run (Python tells an async iterator nothing when a
    loop is left); leaving the block stops a run that has not finished and waits for it to
    wrap up (its spans end, its Step is made); :attr:`step` holds the Step afterwards.

    An exception that ends the run abnormally (a parser bug, a script that ran out) is
    raised by :meth:`result`, by the iteration, or when leaving the block.
    """

    def __init__(
        self,
        parts: AgentParts,
        options: RunOptions,
        opening: list[Message],
        systems: Systems,
        *,
        stream: bool,
    ):
        self._parts = parts
        self._options = options
        self._opening = opening
        self._systems = systems
        self._stream = stream
        self._queue: EventQueue | None = None
        self._stop = anyio.CancelScope()
        self._group: TaskGroup | None = None
        self._done: anyio.Event | None = None
        self._step: Step[Any] | None = None
        self._error: Exception | None = None
        self._error_raised = False

    # --- the block ---

    async def __aenter__(self) -> Self:
        if self._done is not None:
            raise RuntimeError("an AgentRun can be entered only once; start another run")
        self._done = anyio.Event()
        self._queue = EventQueue() if self._stream else None
        group = anyio.create_task_group()
        await group.__aenter__()
        self._group = group
        group.start_soon(self._execute)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        assert self._group is not None and self._done is not None
        if not self._done.is_set():
            self.stop()
        if exc is not None and not isinstance(exc, anyio.get_cancelled_exc_class()):
            # The block raised: let the run wrap up (stopped), then let the block's own
            # exception go on as it is, rather than inside the task group's ExceptionGroup.
            await self._group.__aexit__(None, None, None)
            return
        # The group's own scope is never cancelled, so it suppresses nothing: the block's
        # exceptions (cancellation included) go on.
        await self._group.__aexit__(exc_type, exc, traceback)
        if exc is None and self._error is not None and not self._error_raised:
            self._error_raised = True
            raise self._error

    async def _execute(self) -> None:
        assert self._done is not None
        try:
            self._step = await execute_run(
                self._parts,
                self._options,
                self._opening,
                self._systems,
                stop=self._stop,
                events=self._queue,
            )
        except Exception as exc:  # raised to the caller by result(), iteration or exit
            self._error = exc
        finally:
            if self._queue is not None:
                self._queue.close()
            self._done.set()

    async def execute(self) -> Step[OutputT]:
        """Run it in the calling task, without a block: ``await agent.start(...).execute()``.

        :meth:`stop`, called from another task, stops it: it ends ``failed(cancelled)``
        with its turns, and this returns its Step. An enclosing cancel scope cancels it as
        any await. It costs what ``agent.run()`` costs and a cancel scope, not a task: what
        a batch with a ``batch_timeout`` runs its runs with.

        Raises:
            TypeError: The run came from ``agent.stream()`` (its events need the block).
            RuntimeError: The run was started already.
            SubAgentError: What ended the run abnormally, as ``agent.run()`` raises it.
        """
        if self._stream:
            raise TypeError("agent.stream() delivers its events in its block: async with ...")
        if self._done is not None:
            raise RuntimeError("an AgentRun runs only once; start another run")
        done = self._done = anyio.Event()
        try:
            step = await execute_run(
                self._parts, self._options, self._opening, self._systems, stop=self._stop
            )
        except Exception as exc:
            self._error, self._error_raised = exc, True
            raise
        finally:
            done.set()
        self._step = step
        return cast("Step[OutputT]", step)

    # --- the run ---

    def stop(self) -> None:
        """Stop the run: it ends ``failed(cancelled)`` at its next await, keeping its turns.

        A tool running in a worker thread is abandoned (the thread finishes on its own).
        Stopping a finished run does nothing.
        """
        self._stop.cancel()

    async def result(self) -> Step[OutputT]:
        """Wait for the run to finish and return its :class:`~subagent.Step`.

        Raises:
            RuntimeError: The block was not entered.
            SubAgentError: The exception that ended the run abnormally.
        """
        done = self._require_entered()
        await done.wait()
        return self._finished_step()

    @property
    def step(self) -> Step[OutputT] | None:
        """The run's Step once it has finished, else ``None``."""
        return cast("Step[OutputT] | None", self._step)

    @property
    def done(self) -> bool:
        """Whether the run has finished (or ended abnormally)."""
        return self._done is not None and self._done.is_set()

    # --- the events ---

    def __aiter__(self) -> Self:
        if not self._stream:
            raise TypeError("agent.start() delivers no events: use agent.stream() to iterate")
        self._require_entered()
        return self

    async def __anext__(self) -> RunEvent:
        assert self._queue is not None
        event = await self._queue.get()
        if event is None:
            if self._error is not None and not self._error_raised:
                self._error_raised = True
                raise self._error
            raise StopAsyncIteration
        return event

    @overload
    def stream_output(self) -> AsyncIterator[PartialOutput[OutputT]]: ...

    @overload
    def stream_output(
        self, *, events: Literal[True]
    ) -> AsyncIterator[RunEvent | PartialOutput[OutputT]]: ...

    @overload
    def stream_output(
        self, *, events: bool
    ) -> AsyncIterator[RunEvent | PartialOutput[OutputT]]: ...

    def stream_output(
        self, *, events: bool = False
    ) -> AsyncIterator[RunEvent | PartialOutput[OutputT]]:
        """The output as it forms: ``async for partial in run.stream_output():``.

        Yields a :class:`~subagent.PartialOutput` each time the JSON of the reply so far
        validates to something new (partially: a string or number at the end may still
        grow, fields not reached have their defaults), then, when the run ends done, its
        output validated in full (``final=True``). Each is the whole output so far: show
        the latest. ``index`` is the turn it was read from; a correction turn starts over
        with its own index. A paused or failed run ends the iteration with no final one:
        ``await run.result()`` says why.

        The reply is parsed in the iterating task, not the run's, and again only once it
        grew by 32 characters or a sixteenth of its length: linear work in all (see
        ``docs/streaming.md``). It reads the run's events: iterate this or the run, not
        both; ``events=True`` yields every event too, each partial output right after the
        ``TextDelta`` that completed it and the final one just before ``RunEnded``.

        Raises:
            TypeError: The run came from ``agent.start()`` (it has no events), or the
                agent's output is not JSON of a type (text, or a parser of its own).
            RuntimeError: The block was not entered.
        """
        if not self._stream:
            raise TypeError("agent.start() delivers no events: use agent.stream() for its output")
        self._require_entered()
        parts = self._parts
        reader = partial_output_reader(parts.name, parts.contract, parts.protocol.name)
        return _OutputStream(self, reader, events)

    # --- helpers ---

    def _require_entered(self) -> anyio.Event:
        if self._done is None:
            raise RuntimeError(
                "use the run as a context manager: `async with agent.stream(...) as run:` "
                "(or agent.start(...)); it lives as long as the block"
            )
        return self._done

    def _finished_step(self) -> Step[OutputT]:
        if self._error is not None:
            self._error_raised = True
            raise self._error
        assert self._step is not None
        return cast("Step[OutputT]", self._step)


class _OutputStream(Generic[OutputT]):
    """The iterator of :meth:`AgentRun.stream_output`: partial outputs (and the events)."""

    __slots__ = ("_events", "_next", "_reader", "_run")

    def __init__(self, run: AgentRun[OutputT], reader: PartialOutputReader[OutputT], events: bool):
        self._run = run
        self._reader = reader
        self._events = events
        self._next: RunEvent | PartialOutput[OutputT] | None = None

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> RunEvent | PartialOutput[OutputT]:
        waiting = self._next
        if waiting is not None:
            self._next = None
            return waiting
        while True:
            event = await self._run.__anext__()  # StopAsyncIteration, or the run's error
            partial = self._reader.read(event)
            if not self._events:
                if partial is not None:
                    return partial
                continue
            if partial is None:
                return event
            if partial.final:  # before RunEnded, which stays the last event
                self._next = event
                return partial
            self._next = partial  # after the TextDelta (or TurnEnded) that completed it
            return event
