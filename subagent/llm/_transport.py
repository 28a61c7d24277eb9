"""One LLM call with transport retries: repeated inside the same turn, spending no turn.

The adapter classifies failures as :class:`~subagent.LLMError`; the :class:`RetryPolicy`
decides which are repeated and how long to wait. Nothing about a retry reaches the
conversation: the same request is sent again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import aclosing
from typing import cast

import anyio
import httpx

from subagent._errors import (
    ConfigurationError,
    ErrorKind,
    LLMError,
    ScriptExhaustedError,
    blame_user_code,
    callback_error,
)
from subagent.llm._allow import ModelRequestsBlockedError
from subagent.llm._protocol import LLM, LLMRequest, LLMResponse, StreamDelta, StreamingLLM, Usage
from subagent.llm._retry_policy import RetryPolicy
from subagent.records import TransportRetry

__all__ = ["DeltaHandler", "RetriesItsCalls", "TransportRetry", "call_with_retries"]

DeltaHandler = Callable[[StreamDelta], Awaitable[None] | None]
"""Receives each piece of a streamed reply; may return an awaitable to slow the stream down
(a consumer that is behind)."""


class RetriesItsCalls:
    """An LLM that runs the transport retries of its calls itself (:class:`FallbackLLM`).

    :func:`call_with_retries` hands such a model the whole call: the policy, the timeout
    of one attempt, and where retries and streamed pieces are reported.
    """

    async def answer_with_retries(
        self,
        request: LLMRequest,
        policy: RetryPolicy,
        call_timeout: float | None,
        on_retry: Callable[[TransportRetry], None],
        on_delta: DeltaHandler | None,
    ) -> LLMResponse:
        """Answer ``request`` as :func:`call_with_retries` would, retries included."""
        raise NotImplementedError


async def _streamed(llm: StreamingLLM, request: LLMRequest, on_delta: DeltaHandler) -> LLMResponse:
    # aclosing: the stream (and its HTTP response) is closed in this task, also when the
    # call is cancelled or times out half-way.
    async with aclosing(llm.stream(request)) as deltas:  # type: ignore[type-var]
        async for delta in deltas:
            if delta.response is not None:
                return delta.response
            if delta.text or delta.reasoning:
                waiting = on_delta(delta)
                if waiting is not None:
                    await waiting
    raise LLMError(ErrorKind.INVALID_RESPONSE, "the stream ended without a final response")


async def call_with_retries(
    llm: LLM,
    request: LLMRequest,
    policy: RetryPolicy,
    call_timeout: float | None,
    on_retry: Callable[[TransportRetry], None],
    on_delta: DeltaHandler | None = None,
) -> LLMResponse:
    """Call ``llm`` until it answers or the policy gives up.

    Args:
        llm: The model.
        request: The request, sent unchanged on every attempt.
        policy: Which errors are retried, and the delays.
        call_timeout: Seconds allowed for one attempt (``None``: no limit).
        on_retry: Told about each retry before its delay.
        on_delta: When set and the model can stream, receives the reply's text and
            reasoning as they arrive (a retried call streams again from the start); an
            awaitable it returns is awaited before the next piece is read.

    What is a failed call (retried as the policy says, then the turn's ``llm_error``): an
    :class:`~subagent.LLMError` the adapter raises, a ``TimeoutError``, and a network error
    the adapter left unclassified (``httpx.TransportError``, ``ConnectionError``). Anything
    else the model's code raises is a bug in it: raised out of the run as it is, with the
    run's turns in ``.turns``.

    Raises:
        LLMError: The last classified error, once the policy gives up.
        ScriptExhaustedError: A scripted model ran out (a bug in the test, never retried).
        ConfigurationError: The model found its configuration incomplete at its first
            call (a spec string without its key); raised as it is, never retried.
        ModelRequestsBlockedError: Tests blocked real model requests.
    """
    if isinstance(llm, RetriesItsCalls):  # a FallbackLLM: retries each of its models
        return await llm.answer_with_retries(request, policy, call_timeout, on_retry, on_delta)
    stream = on_delta is not None and isinstance(llm, StreamingLLM)
    attempt = 0
    while True:
        attempt += 1
        try:
            # The plain call is awaited here rather than in a helper: one coroutine less
            # per call in flight, which thousands of concurrent runs feel.
            if call_timeout is None:
                if not stream:
                    return await llm.complete(request)
                return await _streamed(
                    cast(StreamingLLM, llm), request, cast(DeltaHandler, on_delta)
                )
            with anyio.CancelScope(deadline=anyio.current_time() + call_timeout):
                if not stream:
                    return await llm.complete(request)
                return await _streamed(
                    cast(StreamingLLM, llm), request, cast(DeltaHandler, on_delta)
                )
            # Reached only when the scope's deadline cancelled the call.
            error = LLMError(ErrorKind.TIMEOUT, f"no reply within {call_timeout:g} s")
        except LLMError as exc:
            error = exc
        except TimeoutError as exc:  # raised by the adapter itself (its own wait_for, say)
            detail = f": {exc}" if str(exc) else ""
            error = LLMError(ErrorKind.TIMEOUT, f"the model call raised TimeoutError{detail}")
        except (ScriptExhaustedError, ConfigurationError, ModelRequestsBlockedError):
            raise  # a bug in the test or the set-up, not a failed call
        except (httpx.TransportError, ConnectionError) as exc:  # the network, unclassified
            error = LLMError(ErrorKind.CONNECTION, f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # a bug in the model's code: raised as it is, never retried
            if callback_error(exc) is exc:  # the user's on_text: raised as it is
                raise
            raise blame_user_code(exc, f"{type(llm).__name__}.complete()") from None
        delay = policy.delay_before_retry(attempt, error)
        if delay is None:
            raise error
        reported = error.usage or (0, 0)
        on_retry(TransportRetry(attempt=attempt, kind=error.kind, message=error.message,
                                delay_s=delay, usage=Usage(input_tokens=reported[0],
                                                           output_tokens=reported[1])))  # fmt: skip
        await anyio.sleep(delay)
