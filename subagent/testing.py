"""Test doubles for code that runs agents: a scripted model that needs no server.

``ScriptedLLM`` plays a fixed script of replies, records every request, and streams its
replies in pieces, so tests of agents (yours and ours) need no network and no real model.
``from subagent import ScriptedLLM`` is the same class.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TypeAlias

from subagent._errors import ConfigurationError, ScriptExhaustedError
from subagent.llm import LLMRequest, LLMResponse, StreamDelta

__all__ = ["ScriptedLLM", "ScriptedReply"]


ScriptedReply: TypeAlias = (
    str
    | LLMResponse
    | BaseException
    | Callable[[LLMRequest], "str | LLMResponse | Awaitable[str | LLMResponse]"]
)


class ScriptedLLM:
    """A deterministic LLM for tests and examples: it plays a script of replies in order.

    Each script item is the reply to one call: a ``str`` (the reply text), an
    :class:`LLMResponse`, an exception instance (raised from ``complete``), or a callable
    taking the :class:`LLMRequest` and returning one of the first two (sync or async).

    The items are checked when the script is built (and by :meth:`extend`): anything else is
    a :class:`~subagent.ConfigurationError` naming its position. Every request is recorded in
    :attr:`requests`. Running past the end of the script raises
    :class:`~subagent.ScriptExhaustedError` naming the call that had no reply. It is a bug in
    the test, not a model failure: it is never retried and propagates out of ``run`` (with
    the turns made so far in ``.turns``) instead of ending the run as a failed step.

    Args:
        script: The replies, in call order.
        model_name: Reported as the model in traces.
    """

    provider_name = "scripted"

    def __init__(self, script: Sequence[ScriptedReply] = (), *, model_name: str = "scripted"):
        self._script: list[ScriptedReply] = _checked(script, 0)
        self._position = 0
        self.model_name = model_name
        self.requests: list[LLMRequest] = []

    @property
    def remaining(self) -> int:
        """How many scripted replies have not been used yet."""
        return len(self._script) - self._position

    def extend(self, replies: Sequence[ScriptedReply]) -> None:
        """Append more replies to the script (checked like the script's own)."""
        self._script.extend(_checked(replies, len(self._script)))

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """Record the request and return the next scripted reply."""
        self.requests.append(request)
        if self._position >= len(self._script):
            raise ScriptExhaustedError(
                f"ScriptedLLM has no reply for call {len(self.requests)}: "
                f"the script held {len(self._script)} replies"
            )
        item = self._script[self._position]
        self._position += 1
        if isinstance(item, BaseException):
            raise item
        if callable(item) and not isinstance(item, LLMResponse):
            produced = item(request)
            if isinstance(produced, Awaitable):
                produced = await produced
            item = produced
        return _as_response(item)

    async def stream(self, request: LLMRequest) -> AsyncIterator[StreamDelta]:
        """Stream the next scripted reply word by word, reasoning first, then the response."""
        response = await self.complete(request)
        for piece in _split_keeping_spaces(response.reasoning):
            yield StreamDelta(reasoning=piece)
        for piece in _split_keeping_spaces(response.text):
            yield StreamDelta(text=piece)
        yield StreamDelta(response=response)


def _checked(script: Sequence[ScriptedReply], start: int) -> list[ScriptedReply]:
    """The script's items as a list, once each is a reply a script may hold.

    Raises:
        ConfigurationError: An item is none of them (naming its position and type), or the
            script is a single string or reply rather than a sequence of them.
    """
    if isinstance(script, str | bytes | LLMResponse) or not isinstance(script, Sequence):
        raise ConfigurationError(
            "script", f"must be a list of replies, got {type(script).__name__}: {script!r:.80}"
        )
    items = list(script)
    for position, item in enumerate(items, start=start):
        if not isinstance(item, str | LLMResponse | BaseException) and not callable(item):
            raise ConfigurationError(
                "script",
                f"item {position} is a {type(item).__name__} ({item!r:.80}); a scripted reply "
                f"must be a str, an LLMResponse, an exception instance or a callable "
                f"returning str/LLMResponse",
            )
    return items


def _as_response(item: object) -> LLMResponse:
    if isinstance(item, LLMResponse):
        return item
    if isinstance(item, str):
        return LLMResponse(text=item)
    raise TypeError(
        f"a scripted reply must be a str, an LLMResponse, an exception or a callable "
        f"returning str/LLMResponse; got {type(item).__name__}"
    )


def _split_keeping_spaces(text: str) -> list[str]:
    pieces: list[str] = []
    start = 0
    for index, char in enumerate(text):
        if char == " ":
            pieces.append(text[start : index + 1])
            start = index + 1
    if start < len(text):
        pieces.append(text[start:])
    return pieces
