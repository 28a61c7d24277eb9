"""The one path a run reports on: an observer, and the scopes it opens for each part of a run.

The turn loop reports four nested kinds of scope, each a context manager::

    with observer.run() as run:                        # the whole run
        with observer.turn(start) as turn:             # one turn (a TurnStart record)
            with observer.chat(request) as chat:       # its LLM call
                chat.retried(retry); chat.text(piece); chat.replied(response)
            with observer.tool(call) as tool:          # each tool call (maybe concurrent)
                tool.returned(result)
            turn.ended(turn_record)
        run.finished(step)

A scope that is left by an exception before its report (``ended``, ``replied``...) was cut
short: the observer records how (cancellation, an error) and closes it all the same.

:class:`Observer` does nothing, cheaply: a run nobody listens to gets :data:`NO_OBSERVER`,
whose scopes are one shared object. OpenTelemetry spans, the ``on_event`` callback and the
``on_text`` callback are implementations; :func:`combine` puts several behind one.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol

from subagent._errors import ConfigurationError, blame_callback
from subagent.llm import LLMRequest, LLMResponse, ToolCall, TransportRetry
from subagent.records import Step, ToolResult, Turn, TurnType

__all__ = [
    "NO_OBSERVER",
    "ChatScope",
    "Observer",
    "RunScope",
    "TextObserver",
    "ToolScope",
    "TurnScope",
    "TurnStart",
    "check_callback",
    "combine",
    "refuse_awaitable",
]


@dataclass(frozen=True, slots=True)
class TurnStart:
    """What an observer is told when a turn starts.

    Attributes:
        index: The 1-based turn number.
        type: The phase the turn starts in.
        work_remaining: Work turns left, this one included (a ``normal`` or
            ``must_return`` turn spends one).
        retries_remaining: Correction turns left, this one included on ``retry`` turns.
        attempt: The 1-based correction attempt on ``retry`` turns, else ``None``.
        total: The correction budget on ``retry`` turns, else ``None``.
        tools_offered: Tools offered to the model in this turn.
        messages: Messages in the request.
        collapsed: Failed-attempt messages left out of the request so far.
    """

    index: int
    type: TurnType
    work_remaining: int
    retries_remaining: int
    attempt: int | None
    total: int | None
    tools_offered: int
    messages: int
    collapsed: int

    @property
    def left_if_cut_short(self) -> tuple[int, int]:
        """(work, retries) left if the turn is cut short: it counts as taken."""
        if self.type is TurnType.RETRY:
            return self.work_remaining, self.retries_remaining - 1
        return self.work_remaining - 1, self.retries_remaining


class _Scope(Protocol):
    def __enter__(self) -> Any: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...


class RunScope(_Scope, Protocol):
    """The whole run; told its :class:`~subagent.Step` when it finishes."""

    def finished(self, step: Step[Any]) -> None: ...


class TurnScope(_Scope, Protocol):
    """One turn; told its :class:`~subagent.Turn` record when it ends."""

    def ended(self, turn: Turn) -> None: ...


class ChatScope(_Scope, Protocol):
    """One LLM call, transport retries included.

    ``text`` and ``reasoning`` receive a streamed reply as it arrives (only when the
    observer ``wants_text``); either may return an awaitable, which the call awaits before
    reading on, inside the call's timeout (the library's own observers never do: a
    consumer that is behind must not make the model look slow).
    """

    def retried(self, retry: TransportRetry) -> None: ...

    def text(self, piece: str) -> Awaitable[None] | None: ...

    def reasoning(self, piece: str) -> Awaitable[None] | None: ...

    def replied(self, response: LLMResponse) -> None: ...


class ToolScope(_Scope, Protocol):
    """One tool call."""

    def returned(self, result: ToolResult) -> None: ...


class _Nothing:
    """Every scope of a run nobody listens to: one object, no state, no work."""

    __slots__ = ()

    def __enter__(self) -> _Nothing:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None

    def finished(self, step: Step[Any]) -> None:
        return None

    def ended(self, turn: Turn) -> None:
        return None

    def retried(self, retry: TransportRetry) -> None:
        return None

    def text(self, piece: str) -> None:
        return None

    def reasoning(self, piece: str) -> None:
        return None

    def replied(self, response: LLMResponse) -> None:
        return None

    def returned(self, result: ToolResult) -> None:
        return None


_NOTHING = _Nothing()


class Observer:
    """What a run reports to. This base class listens to nothing; subclasses override.

    One observer serves one run (it may keep that run's state). The loop calls the scope
    methods in nesting order, tool scopes possibly concurrently within a turn.

    Attributes:
        wants_text: Whether the observer wants the reply's text as it arrives; when no
            observer of a run does, the model is not asked to stream.
    """

    __slots__ = ()

    wants_text: bool = False

    def run(
        self,
        max_turns: int,
        return_retries: int,
        phase: str,
        resumed: bool = False,
        first_part: str | None = None,
    ) -> RunScope:
        """Open the run's scope (its budgets, and the phase it starts in).

        ``resumed``: the run goes on from a saved state; ``first_part``: the W3C
        ``traceparent`` of the run's first part, when it was traced (a span links to it).
        """
        return _NOTHING

    def turn(self, start: TurnStart) -> TurnScope:
        """Open a turn's scope."""
        return _NOTHING

    def chat(self, request: LLMRequest, llm: object = None) -> ChatScope:
        """Open the scope of the turn's LLM call (``llm``: when not the run's model)."""
        return _NOTHING

    def tool(self, call: ToolCall) -> ToolScope:
        """Open the scope of one tool call."""
        return _NOTHING


NO_OBSERVER = Observer()
"""The observer of a run nobody listens to."""


class TextObserver(Observer):
    """``run(on_text=...)``: hands each piece of a streamed reply to a callback."""

    __slots__ = ("_on_text",)

    wants_text = True

    def __init__(self, on_text: Callable[[str], object]):
        self._on_text = on_text

    def chat(self, request: LLMRequest, llm: object = None) -> ChatScope:
        return self

    # The chat scope itself: only text pieces are of interest.

    def __enter__(self) -> TextObserver:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None

    def retried(self, retry: TransportRetry) -> None:
        return None

    def text(self, piece: str) -> None:
        try:
            returned = self._on_text(piece)
        except Exception as exc:
            blame_callback(exc, "on_text")
            raise
        if returned is not None and inspect.isawaitable(returned):
            refuse_awaitable("on_text", returned)

    def reasoning(self, piece: str) -> None:
        return None

    def replied(self, response: LLMResponse) -> None:
        return None


class _Fanout:
    """The scopes of several observers, entered in order and left in reverse order."""

    __slots__ = ("_entered", "_scopes")

    def __init__(self, scopes: list[Any]):
        self._scopes = scopes
        self._entered = 0

    def __enter__(self) -> _Fanout:
        for scope in self._scopes:
            scope.__enter__()
            self._entered += 1
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        # Every entered scope is left, even when leaving one raises; the first such error
        # is raised after the others are closed.
        error: BaseException | None = None
        for scope in reversed(self._scopes[: self._entered]):
            try:
                scope.__exit__(exc_type, exc, traceback)
            except BaseException as raised:
                error = error or raised
        if error is not None:
            raise error

    def finished(self, step: Step[Any]) -> None:
        for scope in self._scopes:
            scope.finished(step)

    def ended(self, turn: Turn) -> None:
        for scope in self._scopes:
            scope.ended(turn)

    def retried(self, retry: TransportRetry) -> None:
        for scope in self._scopes:
            scope.retried(retry)

    def text(self, piece: str) -> Awaitable[None] | None:
        return _all([scope.text(piece) for scope in self._scopes])

    def reasoning(self, piece: str) -> Awaitable[None] | None:
        return _all([scope.reasoning(piece) for scope in self._scopes])

    def replied(self, response: LLMResponse) -> None:
        for scope in self._scopes:
            scope.replied(response)

    def returned(self, result: ToolResult) -> None:
        for scope in self._scopes:
            scope.returned(result)


def _all(waiting: list[Awaitable[None] | None]) -> Awaitable[None] | None:
    """One awaitable for the awaitables in ``waiting`` (``None`` when there are none)."""
    pending = [item for item in waiting if item is not None]
    if not pending:
        return None
    return _await_each(pending)


async def _await_each(pending: list[Awaitable[None]]) -> None:
    for item in pending:
        await item


class _Observers(Observer):
    """Several observers of one run, as one."""

    __slots__ = ("_observers", "wants_text")

    def __init__(self, observers: Sequence[Observer]):
        self._observers = tuple(observers)
        self.wants_text = any(observer.wants_text for observer in observers)

    def run(
        self,
        max_turns: int,
        return_retries: int,
        phase: str,
        resumed: bool = False,
        first_part: str | None = None,
    ) -> RunScope:
        return _Fanout([o.run(max_turns, return_retries, phase, resumed, first_part)
                        for o in self._observers])  # fmt: skip

    def turn(self, start: TurnStart) -> TurnScope:
        return _Fanout([o.turn(start) for o in self._observers])

    def chat(self, request: LLMRequest, llm: object = None) -> ChatScope:
        return _Fanout([o.chat(request, llm) for o in self._observers])

    def tool(self, call: ToolCall) -> ToolScope:
        return _Fanout([o.tool(call) for o in self._observers])


def combine(observers: Sequence[Observer | None]) -> Observer:
    """One observer for all of ``observers`` (``None`` entries are skipped).

    No observer gives :data:`NO_OBSERVER`; one gives itself.
    """
    present = [observer for observer in observers if observer is not None]
    if not present:
        return NO_OBSERVER
    if len(present) == 1:
        return present[0]
    return _Observers(present)


def check_callback(name: str, callback: object) -> None:
    """Check a run's ``on_event`` / ``on_text`` callback when the run is made.

    Callbacks run inside the turn loop, synchronously: an ``async def`` one (or an object
    whose ``__call__`` is one) would never be awaited, so it is refused here.

    Raises:
        ConfigurationError: ``callback`` is not callable, or is asynchronous.
    """
    if callback is None:
        return
    if not callable(callback):
        raise ConfigurationError(name, f"must be callable, got {callback!r}")
    if inspect.iscoroutinefunction(callback) or inspect.iscoroutinefunction(
        getattr(callback, "__call__", None)  # noqa: B004 - the method, not callable()
    ):
        raise ConfigurationError(
            name,
            f"must be a synchronous function, got the async function {callback!r}: it would "
            "never be awaited; use a plain `def` (or agent.stream() to consume events "
            "asynchronously)",
        )


def refuse_awaitable(name: str, returned: object) -> None:
    """A callback returned an awaitable (a coroutine) that nothing would await: refuse it.

    Raises:
        ConfigurationError: Always, marked as raised by the callback.
    """
    close = getattr(returned, "close", None)
    if callable(close):
        close()  # a coroutine never awaited would warn when collected
    error = ConfigurationError(
        name,
        f"must be synchronous, but it returned {type(returned).__name__} {returned!r}, "
        "which would never be awaited; use a plain `def` (or agent.stream())",
    )
    raise blame_callback(error, name)
