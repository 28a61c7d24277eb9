"""Validators: checks on a parsed output, returning ``{valid, errors}``.

A validator is any callable ``(output) -> Validation`` (or the dict form
``{"valid": bool, "errors": [...]}``), sync or async; one whose first parameter is
annotated :class:`~subagent.RunContext` is called ``(ctx, output)``. Failing checks become
feedback for a correction turn; a validator that raises or returns something else is a
bug and raises :class:`~subagent.ParserContractError` naming it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from subagent._context import RunContext, takes_run_context
from subagent._errors import ParserContractError

__all__ = ["Validation", "Validator", "callable_name", "coerce_validation", "run_validators"]

Validator: TypeAlias = Callable[..., Any]
"""``(output) -> Validation | {"valid": bool, "errors": [...]}``, or an awaitable of one."""


@dataclass(frozen=True, slots=True)
class Validation:
    """The verdict of a validator.

    Attributes:
        valid: Whether the output passed.
        errors: What is wrong, one message per problem (empty when valid, non-empty when
            not: the model needs to know what to fix).
    """

    valid: bool
    errors: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.valid, bool):
            raise TypeError(f"Validation.valid must be a bool, got {self.valid!r}")
        if not isinstance(self.errors, tuple) or not all(
            isinstance(error, str) for error in self.errors
        ):
            raise TypeError(f"Validation.errors must be a tuple of str, got {self.errors!r}")
        if self.valid and self.errors:
            raise ValueError("a valid Validation cannot carry errors")
        if not self.valid and not self.errors:
            raise ValueError("a failed Validation needs at least one error message")

    @classmethod
    def ok(cls) -> Validation:
        """A passing verdict."""
        return cls(True)

    @classmethod
    def fail(cls, *errors: str) -> Validation:
        """A failing verdict with one message per problem."""
        return cls(False, tuple(errors))


def callable_name(obj: object) -> str:
    """A readable name for a validator or parser, for error messages."""
    if isinstance(obj, functools.partial):
        return callable_name(obj.func)
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    return name if isinstance(name, str) else type(obj).__name__


def coerce_validation(result: object, validator_name: str) -> Validation:
    """Accept a :class:`Validation` or the dict form; reject anything else.

    The dict form is ``{"valid": bool, "errors": [...]}`` where each error is a string or a
    dict with a ``"message"`` (prefixed by its ``"location"`` or ``"field"`` when present).

    Raises:
        ParserContractError: ``result`` is neither, or contradicts itself (invalid without
            errors, valid with errors), naming the validator.
    """
    if isinstance(result, Validation):
        return result
    if not isinstance(result, Mapping):
        raise ParserContractError(
            f"validator {validator_name!r} returned {type(result).__name__}; expected a "
            f"Validation or a dict {{'valid': bool, 'errors': [...]}}"
        )
    valid = result.get("valid")
    if not isinstance(valid, bool):
        raise ParserContractError(
            f"validator {validator_name!r} returned 'valid' = {valid!r}; expected a bool"
        )
    raw_errors = result.get("errors", ())
    if raw_errors is None:
        raw_errors = ()
    if isinstance(raw_errors, str | bytes | Mapping) or not isinstance(raw_errors, Iterable):
        raise ParserContractError(
            f"validator {validator_name!r} returned 'errors' of type "
            f"{type(raw_errors).__name__}; expected a list of strings or of dicts with "
            f"a 'message'"
        )
    errors = tuple(_error_message(error, validator_name) for error in raw_errors)
    if valid and errors:
        raise ParserContractError(
            f"validator {validator_name!r} returned valid=True with errors {list(errors)!r}"
        )
    if not valid and not errors:
        raise ParserContractError(
            f"validator {validator_name!r} returned valid=False without any error message; "
            f"say what is wrong so the model can fix it"
        )
    return Validation(valid, errors)


def _error_message(error: object, validator_name: str) -> str:
    if isinstance(error, str) and error:
        return error
    if isinstance(error, Mapping):
        message = error.get("message")
        if isinstance(message, str) and message:
            where = error.get("location", error.get("field"))
            return f"{where}: {message}" if where not in (None, "") else message
    raise ParserContractError(
        f"validator {validator_name!r} returned the error {error!r}; expected a non-empty "
        f"string or a dict with a non-empty 'message'"
    )


async def run_validators(
    validators: Iterable[Validator], output: Any, context: RunContext[Any] | None = None
) -> Validation:
    """Run every validator on ``output`` in order and merge their verdicts.

    Async validators (or sync ones returning an awaitable) are awaited. All validators run
    even after one fails, so the feedback lists every problem at once. With ``context``,
    a validator whose first parameter is a :class:`~subagent.RunContext` gets it first.

    Returns:
        ``Validation.ok()`` when all pass, else a failure carrying all their errors in order.

    Raises:
        ParserContractError: A validator raised (chained from its exception) or broke the
            contract, naming the validator.
    """
    errors: list[str] = []
    for validator in validators:
        name = callable_name(validator)
        try:
            if context is not None and takes_run_context(validator):
                result = validator(context, output)
            else:
                result = validator(output)
            if inspect.isawaitable(result):
                result = await _await(result)
        except Exception as exc:
            raise ParserContractError(
                f"validator {name!r} raised {type(exc).__name__}: {exc} (a validator must "
                f"return Validation.fail(...) for outputs it rejects)"
            ) from exc
        verdict = coerce_validation(result, name)
        errors.extend(verdict.errors)
    return Validation.fail(*errors) if errors else Validation.ok()


async def _await(awaitable: Awaitable[Any]) -> Any:
    return await awaitable
