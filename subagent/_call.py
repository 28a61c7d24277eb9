"""The call stage of a turn: one request to the model, transport retries inside.

The chat scope hears of each transport retry and, when an observer wants the text as it
arrives, of each piece of a streamed reply (reasoning and text apart). The reply comes back
with its ``<think>`` blocks moved out of its text.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from subagent._errors import LLMContractError
from subagent._turns import TurnDraft
from subagent.llm import LLM, LLMRequest, LLMResponse, RetryPolicy, StreamDelta, TransportRetry
from subagent.llm._reasoning import ReasoningSplitter, split_reasoning
from subagent.llm._transport import call_with_retries
from subagent.observe._observer import NO_OBSERVER, ChatScope, Observer

__all__ = ["call_model"]


async def call_model(
    llm: LLM,
    request: LLMRequest,
    policy: RetryPolicy,
    timeout: float | None,
    observer: Observer,
    draft: TurnDraft,
    escalated: bool = False,
) -> LLMResponse:
    """Send ``request`` to ``llm``; the reply, its reasoning apart, kept on ``draft``.

    ``escalated``: ``llm`` is not the run's own model (a correction turn's), which the
    chat scope is told.

    Raises:
        LLMError: The call failed for good (not retryable, or its retries spent).
        LLMContractError: ``llm.complete()`` returned something that is not a reply.
    """
    with observer.chat(request, llm if escalated else None) as chat:
        deltas = _Deltas(chat) if observer.wants_text else None
        retried: Callable[[TransportRetry], None] = (
            draft.retried if observer is NO_OBSERVER else _RetryRecorder(draft, chat)
        )
        reply = await call_with_retries(llm, request, policy, timeout, retried, deltas)
        if type(reply) is not LLMResponse and not isinstance(reply, LLMResponse):
            raise LLMContractError(_wrong_reply(llm, reply))
        draft.response = reply
        if deltas is not None:
            await deltas.flush()
        chat.replied(reply)
    response = _reasoning_apart(reply)
    draft.response = response
    return response


class _RetryRecorder:
    """Keeps a turn's transport retries and reports each to the chat scope."""

    __slots__ = ("_chat", "_draft")

    def __init__(self, draft: TurnDraft, chat: ChatScope):
        self._draft = draft
        self._chat = chat

    def __call__(self, retry: TransportRetry) -> None:
        self._draft.retried(retry)
        self._chat.retried(retry)


class _Deltas:
    """Hands a streamed reply's pieces to the chat scope, reasoning and text apart.

    Reasoning comes apart from the text (``reasoning_content``) or inside it (``<think>``
    blocks). Text is passed on as it arrives until a ``<`` shows up; from there a
    :class:`ReasoningSplitter` takes the stream apart (holding back what could begin a tag).
    Call :meth:`flush` once the reply is complete.
    """

    __slots__ = ("_chat", "_sent_text", "_splitter")

    def __init__(self, chat: ChatScope):
        self._chat = chat
        self._splitter: ReasoningSplitter | None = None
        self._sent_text = False

    def __call__(self, delta: StreamDelta) -> Awaitable[None] | None:
        waiting: list[Awaitable[None]] = []
        if delta.reasoning:
            self._send(True, delta.reasoning, waiting)
        text = delta.text
        if text:
            if self._splitter is None and "<" in text:
                self._splitter = ReasoningSplitter(answer_started=self._sent_text)
            if self._splitter is None:
                self._send(False, text, waiting)
            else:
                for is_reasoning, piece in self._splitter.feed(text):
                    self._send(is_reasoning, piece, waiting)
        return _in_turn(waiting)

    async def flush(self) -> None:
        if self._splitter is None:
            return
        waiting: list[Awaitable[None]] = []
        for is_reasoning, piece in self._splitter.flush():
            self._send(is_reasoning, piece, waiting)
        for item in waiting:
            await item

    def _send(self, is_reasoning: bool, piece: str, waiting: list[Awaitable[None]]) -> None:
        if is_reasoning:
            sent = self._chat.reasoning(piece)
        else:
            self._sent_text = self._sent_text or bool(piece.strip())
            sent = self._chat.text(piece)
        if sent is not None:
            waiting.append(sent)


def _in_turn(waiting: list[Awaitable[None]]) -> Awaitable[None] | None:
    if not waiting:
        return None
    if len(waiting) == 1:
        return waiting[0]
    return _each(waiting)


async def _each(waiting: list[Awaitable[None]]) -> None:
    for item in waiting:
        await item


def _wrong_reply(llm: LLM, value: object) -> str:
    """What a model that broke the :class:`~subagent.llm.LLM` protocol returned."""
    shown = repr(value)
    shown = shown if len(shown) <= 80 else f"{shown[:79]}…"
    return (
        f"{type(llm).__name__}.complete() must return an LLMResponse, got "
        f"{type(value).__name__}: {shown}"
    )


def _reasoning_apart(response: LLMResponse) -> LLMResponse:
    """The reply with ``<think>`` blocks moved from its text to its reasoning."""
    reasoning, answer = split_reasoning(response.text)
    if not reasoning:
        return response
    joined = f"{response.reasoning}\n\n{reasoning}" if response.reasoning else reasoning
    return response.model_copy(update={"text": answer, "reasoning": joined})
