"""``retry_loop``: validate a value, correct it, validate again -- for orchestrators.

No LLM of its own: ``validate`` checks a value (``Validation`` or ``{valid, errors}``),
``correct`` makes a new value from the old one and the errors (often by calling an agent),
and the loop repeats until the value is valid or ``max_corrections`` corrections are spent
(``max_retries``, the former name, is accepted and deprecated). A
``correct`` that raises ends the loop with the error recorded and the last validated value
kept. Each validation and correction is an OpenTelemetry span when tracing is on.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import anyio
from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode, TracerProvider

from subagent.__about__ import __version__
from subagent._checks import check_int, check_seconds
from subagent._errors import ConfigurationError
from subagent._text import shorten
from subagent.observe._otel import ERROR_TEXT_LIMIT, capture_enabled
from subagent.parsers import Validation, Validator
from subagent.parsers._validation import callable_name, run_validators

__all__ = ["CorrectionError", "RetryLoop", "RetryLoopResult", "retry_loop"]

T = TypeVar("T")
Corrector = Callable[[Any, tuple[str, ...]], Any]
"""``(value, errors) -> new value``, or an awaitable of one."""

_ATTEMPT = "subagent.retry_loop.attempt"
_VALID = "subagent.retry_loop.valid"
_ERROR_COUNT = "subagent.retry_loop.error_count"


@dataclass(frozen=True, slots=True)
class CorrectionError:
    """A ``correct`` call that raised.

    Attributes:
        type: The exception's type name.
        message: The exception's text.
        attempt: Which correction raised (1-based).
        exception: The exception itself (not compared, not in ``repr``).
    """

    type: str
    message: str
    attempt: int
    exception: Exception | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return f"correction {self.attempt} raised {self.type}: {self.message}"


@dataclass(frozen=True, slots=True)
class RetryLoopResult(Generic[T]):
    """How a retry loop ended.

    Attributes:
        valid: Whether the final value validated.
        value: The final value: the last one validated (a failed correction produces none).
        count: Corrections made (successful ``correct`` calls).
        errors: The errors of the last validation (empty when valid).
        exhausted: Invalid after all ``max_corrections`` corrections.
        error: Set when ``correct`` raised; the loop stopped there.
    """

    valid: bool
    value: T
    count: int
    errors: tuple[str, ...] = ()
    exhausted: bool = False
    error: CorrectionError | None = None


class RetryLoop(Generic[T]):
    """A reusable validate -> correct -> re-validate loop; arguments are checked here.

    Args:
        validate: A validator ``(value) -> Validation | {"valid": bool, "errors": [...]}``
            (sync or async), or a sequence of them (all run; their errors are merged).
        correct: ``(value, errors) -> new value`` (sync or async); ``errors`` is a tuple of
            messages from the last validation.
        max_corrections: Corrections allowed (>= 0; 0 only validates).
        retry_delay: Seconds to wait before each correction (>= 0).
        max_retries: Deprecated spelling of ``max_corrections`` (the same meaning).
        tracer_provider: Where spans go (default: the global provider).

    Raises:
        ConfigurationError: An argument is invalid; the message names it.

    Warns:
        DeprecationWarning: ``max_retries`` was given.
    """

    def __init__(
        self,
        validate: Validator | Sequence[Validator],
        correct: Corrector,
        max_corrections: int | None = None,
        retry_delay: float = 0,
        *,
        max_retries: int | None = None,
        tracer_provider: TracerProvider | None = None,
    ):
        corrections = _corrections(max_corrections, max_retries)
        validators = (
            tuple(validate)
            if isinstance(validate, Sequence) and not isinstance(validate, str)
            else (validate,)
        )
        if not validators or not all(callable(v) for v in validators):
            raise ConfigurationError(
                "validate", f"must be a callable or a non-empty list of callables, got {validate!r}"
            )
        if not callable(correct):
            raise ConfigurationError("correct", f"must be callable, got {correct!r}")
        delay = check_seconds("retry_delay", retry_delay, allow_zero=True)
        if delay is None:
            raise ConfigurationError("retry_delay", "must be a number of seconds >= 0, got None")
        self.validators = validators
        self.correct = correct
        self.max_corrections: int = corrections
        self.retry_delay = delay
        self._tracer = trace.get_tracer(
            "subagent.retry_loop", __version__, tracer_provider=tracer_provider
        )

    @property
    def max_retries(self) -> int:
        """Deprecated: :attr:`max_corrections`."""
        warnings.warn(
            "RetryLoop.max_retries is deprecated: read max_corrections",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.max_corrections

    async def run(self, value: T) -> RetryLoopResult[T]:
        """Validate ``value``, correcting it up to ``max_corrections`` times until it is valid.

        Raises:
            ParserContractError: A validator raised or broke its contract (a bug, not a
                correctable failure).
        """
        capture = capture_enabled()  # validators' and correctors' words reach spans only so
        verdict = await self._validate(value, 0, capture)
        count = 0
        while not verdict.valid and count < self.max_corrections:
            if self.retry_delay:
                await anyio.sleep(self.retry_delay)
            attempt = count + 1
            with self._tracer.start_as_current_span(
                "retry_loop.correct",
                attributes={_ATTEMPT: attempt, _ERROR_COUNT: len(verdict.errors)},
                record_exception=False,
                set_status_on_exception=False,
            ) as span:
                try:
                    corrected = self.correct(value, verdict.errors)
                    if inspect.isawaitable(corrected):
                        corrected = await corrected
                except Exception as exc:
                    _mark_error(span, exc, capture)
                    error = CorrectionError(type(exc).__qualname__, str(exc), attempt, exc)
                    return RetryLoopResult(False, value, count, verdict.errors, False, error)
            value, count = corrected, attempt
            verdict = await self._validate(value, attempt, capture)
        return RetryLoopResult(
            verdict.valid, value, count, verdict.errors, exhausted=not verdict.valid
        )

    async def _validate(self, value: T, attempt: int, capture: bool) -> Validation:
        with self._tracer.start_as_current_span(
            "retry_loop.validate",
            attributes={_ATTEMPT: attempt},
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                verdict = await run_validators(self.validators, value)
            except Exception as exc:
                _mark_error(span, exc, capture)
                raise
            span.set_attribute(_VALID, verdict.valid)
            span.set_attribute(_ERROR_COUNT, len(verdict.errors))
            if not verdict.valid:
                errors = verdict.errors
                text = "; ".join(errors) if capture else f"{len(errors)} validation error(s)"
                span.set_status(Status(StatusCode.ERROR, shorten(text, ERROR_TEXT_LIMIT)))
            return verdict

    def __repr__(self) -> str:
        names = ", ".join(callable_name(v) for v in self.validators)
        return (
            f"RetryLoop(validate=[{names}], correct={callable_name(self.correct)}, "
            f"max_corrections={self.max_corrections}, retry_delay={self.retry_delay})"
        )


def _mark_error(span: Span, exc: BaseException, capture: bool) -> None:
    """An exception on a span: its class always, its message only with content capture."""
    name = type(exc).__qualname__
    span.set_attribute("error.type", name)
    if capture:
        span.record_exception(exc)
        text = f"{type(exc).__name__}: {exc}"
    else:
        text = name
    span.set_status(Status(StatusCode.ERROR, shorten(text, ERROR_TEXT_LIMIT)))


def _corrections(max_corrections: int | None, max_retries: int | None) -> int:
    """The correction budget from the new spelling or the deprecated one (default 1).

    Called by the public callers only (the warning points at their caller's line).

    Raises:
        ConfigurationError: Both are given, or the one given is not an integer >= 0.
    """
    if max_retries is None:
        return check_int("max_corrections", 1 if max_corrections is None else max_corrections, 0)
    warnings.warn(
        "max_retries is deprecated: pass max_corrections (the same meaning: corrections "
        "after a failed validation)",
        DeprecationWarning,
        stacklevel=3,
    )
    if max_corrections is not None:
        raise ConfigurationError(
            "max_corrections", "give max_corrections or the deprecated max_retries, not both"
        )
    return check_int("max_retries", max_retries, 0)


async def retry_loop(
    value: T,
    validate: Validator | Sequence[Validator],
    correct: Corrector,
    max_corrections: int | None = None,
    retry_delay: float = 0,
    *,
    max_retries: int | None = None,
    tracer_provider: TracerProvider | None = None,
) -> RetryLoopResult[T]:
    """Validate ``value`` and correct it until valid; a one-shot :class:`RetryLoop`.

    ``max_corrections`` (default 1) counts corrections after a failed validation;
    ``max_retries`` is its deprecated spelling (a ``DeprecationWarning``).

    Example:
        ``result = await retry_loop(draft, check_citations, fix_citations,
        max_corrections=2)`` then ``result.valid``, ``result.value``, ``result.errors``,
        ``result.count``.

    Raises:
        ConfigurationError: An argument is invalid (before anything runs).
        ParserContractError: A validator raised or broke its contract.
    """
    corrections = _corrections(max_corrections, max_retries)
    loop: RetryLoop[T] = RetryLoop(
        validate, correct, corrections, retry_delay, tracer_provider=tracer_provider
    )
    return await loop.run(value)
