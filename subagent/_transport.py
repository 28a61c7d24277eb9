"""One LLM call with transport retries: repeated inside the same turn, spending no turn.

The adapter classifies failures as :class:`~subagent.LLMError`; the :class:`RetryPolicy`
decides which are repeated and how long to wait. Nothing about a retry reaches the
conversation: the same request is sent again.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio

from subagent._errors import ErrorKind, LLMError, ScriptExhaustedError
from subagent._records import TransportRetry
from subagent._retry_policy import RetryPolicy
from subagent.llm import LLM, LLMRequest, LLMResponse

__all__ = ["call_with_retries"]


async def call_with_retries(
    llm: LLM,
    request: LLMRequest,
    policy: RetryPolicy,
    call_timeout: float | None,
    on_retry: Callable[[TransportRetry], None],
) -> LLMResponse:
    """Call ``llm`` until it answers or the policy gives up.

    Args:
        llm: The model.
        request: The request, sent unchanged on every attempt.
        policy: Which errors are retried, and the delays.
        call_timeout: Seconds allowed for one attempt (``None``: no limit).
        on_retry: Told about each retry before its delay.

    Raises:
        LLMError: The last classified error, once the policy gives up.
        ScriptExhaustedError: A scripted model ran out (a bug in the test, never retried).
    """
    attempt = 0
    while True:
        attempt += 1
        try:
            if call_timeout is None:
                return await llm.complete(request)
            with anyio.fail_after(call_timeout):
                return await llm.complete(request)
        except LLMError as exc:
            error = exc
        except TimeoutError:
            error = LLMError(ErrorKind.TIMEOUT, f"no reply within {call_timeout:g} s")
        except ScriptExhaustedError:
            raise
        except Exception as exc:  # an adapter bug or an unclassified failure: never retried
            raise LLMError(ErrorKind.OTHER, f"{type(exc).__name__}: {exc}") from exc
        delay = policy.delay_before_retry(attempt, error)
        if delay is None:
            raise error
        on_retry(TransportRetry(attempt=attempt, kind=error.kind, message=error.message,
                                delay_s=delay))  # fmt: skip
        await anyio.sleep(delay)
