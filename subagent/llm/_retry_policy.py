"""Transport retries: which failed calls are repeated, and how long to wait before each."""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from dataclasses import dataclass, field

from subagent._checks import check_int, check_number
from subagent._errors import ConfigurationError, ErrorKind, LLMError

__all__ = ["DEFAULT_RETRYABLE", "MAX_BACKOFF_EXPONENT", "RetryPolicy"]

MAX_BACKOFF_EXPONENT = 64
"""The largest power of ``multiplier`` a delay uses: ``multiplier ** (attempt - 1)`` at a
large attempt number would overflow a float (``OverflowError``), and any delay that large is
cut to ``max_delay`` anyway."""

DEFAULT_RETRYABLE: frozenset[ErrorKind] = frozenset(
    {
        ErrorKind.RATE_LIMIT,
        ErrorKind.SERVER_ERROR,
        ErrorKind.TIMEOUT,
        ErrorKind.CONNECTION,
        ErrorKind.INVALID_RESPONSE,
    }
)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a failed LLM call is repeated inside the same turn.

    Retries spend no turn and add nothing to the conversation. Only the kinds in
    ``retry_on`` are retried; everything else (authentication, bad request, content filter)
    ends the run at once as ``failed(llm_error)``.

    Args:
        max_attempts: Total attempts of one call, the first included (``1`` disables retries).
        initial_delay: Seconds before the first retry.
        multiplier: Growth factor of the delay per retry.
        max_delay: Upper bound of one delay. A ``Retry-After`` longer than this is not
            waited out: the call fails instead of hammering the server early.
        jitter: Random spread as a fraction of the delay (``0.2`` = +/-20%).
        retry_on: The retryable error kinds (:class:`~subagent.ErrorKind` members or their
            values, in any collection).

    Raises:
        ConfigurationError: A value is invalid (an unknown error kind included); the
            message names the field.
    """

    max_attempts: int = 3
    initial_delay: float = 0.5
    multiplier: float = 2.0
    max_delay: float = 30.0
    jitter: float = 0.2
    retry_on: frozenset[ErrorKind] = field(default=DEFAULT_RETRYABLE)

    def __post_init__(self) -> None:
        check_int("max_attempts", self.max_attempts, 1)
        for name in ("initial_delay", "max_delay", "jitter"):
            check_number(name, getattr(self, name), 0.0)
        check_number("multiplier", self.multiplier, 1.0)
        object.__setattr__(self, "retry_on", _kinds(self.retry_on))

    @classmethod
    def none(cls) -> RetryPolicy:
        """A policy that never retries."""
        return cls(max_attempts=1)

    def delay_before_retry(self, attempt: int, error: LLMError) -> float | None:
        """Seconds to wait before the next attempt, or ``None`` to give up.

        Args:
            attempt: The 1-based number of the attempt that just failed.
            error: Its classified error.
        """
        if attempt >= self.max_attempts or error.kind not in self.retry_on:
            return None
        if error.retry_after is not None:
            return error.retry_after if error.retry_after <= self.max_delay else None
        delay = min(self._backoff(attempt), self.max_delay)
        if self.jitter:
            delay *= 1 + random.uniform(-self.jitter, self.jitter)
        return max(0.0, min(delay, self.max_delay))

    def _backoff(self, attempt: int) -> float:
        """``initial_delay * multiplier ** (attempt - 1)``, without overflowing.

        The exponent is capped at :data:`MAX_BACKOFF_EXPONENT` (a delay past ``max_delay``
        is cut to it anyway), and a power too large for a float counts as infinite.
        """
        if self.initial_delay == 0 or self.multiplier == 1:
            return self.initial_delay
        exponent = min(max(attempt - 1, 0), MAX_BACKOFF_EXPONENT)
        try:
            return self.initial_delay * self.multiplier**exponent
        except OverflowError:
            return math.inf


def _kinds(kinds: object) -> frozenset[ErrorKind]:
    """``retry_on`` as a set of kinds; every member must name an :class:`ErrorKind`."""
    known = ", ".join(kind.value for kind in ErrorKind)
    if isinstance(kinds, str | bytes) or not isinstance(kinds, Iterable):
        raise ConfigurationError(
            "retry_on", f"must be a collection of error kinds ({known}), got {kinds!r}"
        )
    checked: set[ErrorKind] = set()
    for kind in kinds:
        try:
            checked.add(ErrorKind(kind))
        except ValueError:
            raise ConfigurationError(
                "retry_on", f"{kind!r} is not an error kind; known: {known}"
            ) from None
    return frozenset(checked)
