"""The events of a run as an async stream: the observer behind ``SubAgent.stream()``.

The run's task puts events into an :class:`EventQueue`; the consumer takes them out. Nothing
the run puts ever waits for the consumer: the model's call is never held back by a reader
that is slow, busy awaiting ``run.result()``, or gone, so a call's timeout measures the
server alone. Events about the run, its turns and tool calls are kept one by one (a run
makes a bounded number of them). Text and reasoning deltas are the stream's volume: once
:data:`DELTA_ROOM` events are waiting, a new delta is merged into the last waiting delta of
its kind and turn, so the events waiting stay bounded and the text they carry is the text
the model sent, in order (the memory it holds is at most the run's replies, which the Step
keeps too).
"""

from __future__ import annotations

from collections import deque

import anyio

from subagent.llm import LLMRequest, LLMResponse, TransportRetry
from subagent.observe._events import (
    CallRetried,
    EventObserver,
    ReasoningDelta,
    RunEvent,
    TextDelta,
)
from subagent.observe._observer import ChatScope

__all__ = ["DELTA_ROOM", "EventQueue", "StreamObserver"]

DELTA_ROOM = 256
"""Events that may wait for the consumer before new deltas are merged into waiting ones."""

_Delta = TextDelta | ReasoningDelta


class _Merged:
    """Deltas of one kind and turn merged while the consumer is behind: pieces, joined once."""

    __slots__ = ("agent", "index", "kind", "pieces")

    def __init__(self, first: _Delta, second: _Delta):
        self.kind = type(first)
        self.agent = first.agent
        self.index = first.index
        self.pieces = [first.text, second.text]

    def takes(self, delta: _Delta) -> bool:
        return type(delta) is self.kind and delta.index == self.index

    def event(self) -> _Delta:
        return self.kind(self.agent, self.index, "".join(self.pieces))


class EventQueue:
    """Events from one producer task to one consumer task, in order; putting never waits.

    :meth:`put` queues an event; :meth:`put_delta` queues a text or reasoning delta, merged
    into the last waiting delta of its kind and turn once :data:`DELTA_ROOM` events wait.
    :meth:`close` ends the stream: :meth:`get` returns ``None`` once it is empty.
    """

    __slots__ = ("_closed", "_items", "_readable", "_room")

    def __init__(self, room: int = DELTA_ROOM):
        self._items: deque[RunEvent | _Merged] = deque()
        self._room = room
        self._closed = False
        self._readable = anyio.Event()

    def __len__(self) -> int:
        return len(self._items)

    def put(self, event: RunEvent) -> None:
        """Queue ``event`` now (events about the run, its turns and tools)."""
        self._items.append(event)
        self._readable.set()

    def put_delta(self, event: _Delta) -> None:
        """Queue a delta now: on its own while there is room, else merged into a waiting one.

        Merging looks at the last two waiting events (a reply's text and reasoning may
        alternate), so once the room is full the queue grows by at most one event per kind
        and turn: text stays in order, and so does reasoning.
        """
        items = self._items
        if len(items) >= self._room:
            for position in (len(items) - 1, len(items) - 2):
                if position < 0:
                    break
                waiting = items[position]
                if isinstance(waiting, _Merged):
                    if waiting.takes(event):
                        waiting.pieces.append(event.text)
                        return
                elif isinstance(waiting, TextDelta | ReasoningDelta):
                    if type(waiting) is type(event) and waiting.index == event.index:
                        items[position] = _Merged(waiting, event)
                        return
                else:
                    break  # never across an event about the run, its turns or tools
        self.put(event)

    async def get(self) -> RunEvent | None:
        """The next event, waiting for it; ``None`` when the stream is closed and empty."""
        while not self._items:
            if self._closed:
                return None
            if self._readable.is_set():
                self._readable = anyio.Event()
            await self._readable.wait()
        item = self._items.popleft()
        return item.event() if isinstance(item, _Merged) else item

    def close(self) -> None:
        """No more events will come; a waiting consumer goes on."""
        self._closed = True
        self._readable.set()


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
        self._queue.put(CallRetried(self._agent, self._index, retry))

    def text(self, piece: str) -> None:
        self._queue.put_delta(TextDelta(self._agent, self._index, piece))

    def reasoning(self, piece: str) -> None:
        self._queue.put_delta(ReasoningDelta(self._agent, self._index, piece))

    def replied(self, response: LLMResponse) -> None:
        return None


class StreamObserver(EventObserver):
    """Every event of a run, deltas and retried calls included, into an :class:`EventQueue`."""

    __slots__ = ("_queue",)

    wants_text = True

    def __init__(self, agent: str, queue: EventQueue):
        super().__init__(agent, queue.put)
        self._queue = queue

    def chat(self, request: LLMRequest, llm: object = None) -> ChatScope:
        return _DeltaScope(self._queue, self._agent, self._index)
