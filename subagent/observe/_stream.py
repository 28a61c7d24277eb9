"""The events of a run as an async stream: the observer behind ``SubAgent.stream()``.

The run's task puts events into an :class:`EventQueue`; the consumer takes them out. Events
about the run, its turns and tool calls are never dropped and never wait (a run makes a
bounded number of them). Text and reasoning deltas are the stream's volume: once
:data:`DELTA_ROOM` events are waiting, the next delta waits for the consumer, which slows
the model's stream down rather than letting the queue grow.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable

import anyio

from subagent.llm import LLMRequest, LLMResponse, TransportRetry
from subagent.observe._events import EventObserver, ReasoningDelta, RunEvent, TextDelta
from subagent.observe._observer import ChatScope

__all__ = ["DELTA_ROOM", "EventQueue", "StreamObserver"]

DELTA_ROOM = 256
"""Events that may wait for the consumer before a delta waits for room."""


class EventQueue:
    """Events from one producer task to one consumer task, in order.

    :meth:`put` never waits; :meth:`put_delta` waits while :data:`DELTA_ROOM` events are
    queued. :meth:`close` ends the stream: :meth:`get` returns ``None`` once it is empty.
    """

    __slots__ = ("_closed", "_items", "_readable", "_room", "_writable")

    def __init__(self, room: int = DELTA_ROOM):
        self._items: deque[RunEvent] = deque()
        self._room = room
        self._closed = False
        self._readable = anyio.Event()
        self._writable = anyio.Event()

    def __len__(self) -> int:
        return len(self._items)

    def put(self, event: RunEvent) -> None:
        """Queue ``event`` now (events about the run, its turns and tools)."""
        self._items.append(event)
        self._readable.set()

    def put_delta(self, event: RunEvent) -> Awaitable[None] | None:
        """Queue a delta now if there is room; else an awaitable that queues it when there is."""
        if len(self._items) < self._room or self._closed:
            self.put(event)
            return None
        return self._put_when_room(event)

    async def _put_when_room(self, event: RunEvent) -> None:
        while len(self._items) >= self._room and not self._closed:
            if self._writable.is_set():
                self._writable = anyio.Event()
            await self._writable.wait()
        self.put(event)

    async def get(self) -> RunEvent | None:
        """The next event, waiting for it; ``None`` when the stream is closed and empty."""
        while not self._items:
            if self._closed:
                return None
            if self._readable.is_set():
                self._readable = anyio.Event()
            await self._readable.wait()
        event = self._items.popleft()
        self._writable.set()
        return event

    def close(self) -> None:
        """No more events will come; a waiting producer or consumer goes on."""
        self._closed = True
        self._readable.set()
        self._writable.set()


class _DeltaScope:
    """The chat scope of a streamed run: the reply's pieces become delta events."""

    __slots__ = ("_agent", "_index", "_queue")

    def __init__(self, queue: EventQueue, agent: str, index: int):
        self._queue = queue
        self._agent = agent
        self._index = index

    def __enter__(self) -> _DeltaScope:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None

    def retried(self, retry: TransportRetry) -> None:
        return None

    def text(self, piece: str) -> Awaitable[None] | None:
        return self._queue.put_delta(TextDelta(self._agent, self._index, piece))

    def reasoning(self, piece: str) -> Awaitable[None] | None:
        return self._queue.put_delta(ReasoningDelta(self._agent, self._index, piece))

    def replied(self, response: LLMResponse) -> None:
        return None


class StreamObserver(EventObserver):
    """Every event of a run, deltas included, into an :class:`EventQueue`."""

    __slots__ = ("_queue",)

    wants_text = True

    def __init__(self, agent: str, queue: EventQueue):
        super().__init__(agent, queue.put)
        self._queue = queue

    def chat(self, request: LLMRequest) -> ChatScope:
        return _DeltaScope(self._queue, self._agent, self._index)
