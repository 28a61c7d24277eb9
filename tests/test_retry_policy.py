"""RetryPolicy: which errors are retried, and the delays."""

from __future__ import annotations

import pytest

from subagent import ConfigurationError, ErrorKind, LLMError, RetryPolicy


def error(kind: ErrorKind, retry_after: float | None = None) -> LLMError:
    return LLMError(kind, "x", retry_after=retry_after)


@pytest.mark.parametrize(
    "kind", [ErrorKind.RATE_LIMIT, ErrorKind.SERVER_ERROR, ErrorKind.TIMEOUT, ErrorKind.CONNECTION]
)
def test_transient_kinds_are_retried(kind: ErrorKind) -> None:
    assert RetryPolicy().delay_before_retry(1, error(kind)) is not None


@pytest.mark.parametrize(
    "kind",
    [ErrorKind.AUTHENTICATION, ErrorKind.PERMISSION, ErrorKind.BAD_REQUEST,
     ErrorKind.CONTENT_FILTER, ErrorKind.OTHER],
)  # fmt: skip
def test_permanent_kinds_are_not_retried(kind: ErrorKind) -> None:
    assert RetryPolicy().delay_before_retry(1, error(kind)) is None


def test_backoff_is_exponential_and_capped_without_jitter() -> None:
    policy = RetryPolicy(max_attempts=10, initial_delay=1, multiplier=2, max_delay=5, jitter=0)
    delays = [policy.delay_before_retry(n, error(ErrorKind.SERVER_ERROR)) for n in range(1, 6)]
    assert delays == [1, 2, 4, 5, 5]


@pytest.mark.parametrize("multiplier", [2.0, 10.0, 1e300])
def test_backoff_at_huge_attempt_numbers_is_max_delay_not_an_overflow(multiplier: float) -> None:
    policy = RetryPolicy(max_attempts=10**9, initial_delay=0.5, multiplier=multiplier,
                         max_delay=30, jitter=0)  # fmt: skip
    for attempt in (1100, 10**6, 10**9 - 1):
        assert policy.delay_before_retry(attempt, error(ErrorKind.SERVER_ERROR)) == 30


def test_a_zero_initial_delay_stays_zero_at_any_attempt() -> None:
    policy = RetryPolicy(max_attempts=10**6, initial_delay=0, multiplier=1e300, jitter=0)
    assert policy.delay_before_retry(10**5, error(ErrorKind.TIMEOUT)) == 0


def test_jitter_stays_within_its_fraction() -> None:
    policy = RetryPolicy(initial_delay=1, jitter=0.2)
    delays = {policy.delay_before_retry(1, error(ErrorKind.TIMEOUT)) for _ in range(200)}
    assert all(d is not None and 0.8 <= d <= 1.2 for d in delays) and len(delays) > 1


def test_retry_after_is_honoured_and_too_long_a_wait_gives_up() -> None:
    policy = RetryPolicy(max_delay=10)
    assert policy.delay_before_retry(1, error(ErrorKind.RATE_LIMIT, retry_after=7)) == 7
    assert policy.delay_before_retry(1, error(ErrorKind.RATE_LIMIT, retry_after=60)) is None


def test_attempts_are_bounded() -> None:
    policy = RetryPolicy(max_attempts=2)
    assert policy.delay_before_retry(1, error(ErrorKind.TIMEOUT)) is not None
    assert policy.delay_before_retry(2, error(ErrorKind.TIMEOUT)) is None
    assert RetryPolicy.none().delay_before_retry(1, error(ErrorKind.TIMEOUT)) is None


def test_retry_on_accepts_strings() -> None:
    policy = RetryPolicy(retry_on=frozenset({"bad_request"}))  # type: ignore[arg-type]
    assert policy.delay_before_retry(1, error(ErrorKind.BAD_REQUEST)) is not None


@pytest.mark.parametrize(
    ("field", "value"), [("max_attempts", 0), ("max_attempts", True), ("initial_delay", -1),
                         ("multiplier", 0.5), ("jitter", "x")]
)  # fmt: skip
def test_bad_policy_is_rejected_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(ConfigurationError, match=f"^{field}: "):
        RetryPolicy(**{field: value})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "value",
    [["bogus"], frozenset({"bogus"}), "rate_limit", 3, [ErrorKind.TIMEOUT, None]],
)
def test_bad_retry_on_is_a_configuration_error_naming_it(value: object) -> None:
    with pytest.raises(ConfigurationError, match=r"^retry_on: ") as caught:
        RetryPolicy(retry_on=value)  # type: ignore[arg-type]
    assert caught.value.field == "retry_on"


def test_retry_on_is_normalised_to_error_kinds() -> None:
    policy = RetryPolicy(retry_on=["timeout", ErrorKind.CONNECTION])  # type: ignore[arg-type]
    assert policy.retry_on == frozenset({ErrorKind.TIMEOUT, ErrorKind.CONNECTION})
    assert all(type(kind) is ErrorKind for kind in policy.retry_on)
