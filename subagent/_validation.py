"""Validators: semantic checks run after parsing; their errors become feedback."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from subagent._errors import ParserContractError

__all__ = ["Validation", "coerce_validation", "run_validators"]


@dataclass(frozen=True, slots=True)
class Validation:
    """A validator's verdict.

    Attributes:
        valid: Whether the output passed.
        errors: What is wrong, one message each (shown to the model).
    """

    valid: bool
    errors: tuple[str, ...] = ()

    @classmethod
    def ok(cls) -> Validation:
        """A passing verdict."""
        return cls(True)

    @classmethod
    def fail(cls, *errors: str) -> Validation:
        """A failing verdict with its error messages."""
        return cls(False, tuple(errors))


def _name(validator: Callable[..., Any]) -> str:
    return getattr(validator, "__name__", type(validator).__name__)


def coerce_validation(result: object, validator_name: str) -> Validation:
    """Accept a :class:`Validation` or the dict ``{"valid": bool, "errors": [...]}``.

    Raises:
        ParserContractError: ``result`` is neither.
    """
    if isinstance(result, Validation):
        return result
    if isinstance(result, Mapping) and isinstance(result.get("valid"), bool):
        errors = []
        for error in result.get("errors") or ():
            if isinstance(error, Mapping) and "message" in error:
                errors.append(str(error["message"]))
            else:
                errors.append(str(error))
        return Validation(result["valid"], tuple(errors))
    raise ParserContractError(
        f"validator {validator_name!r} returned {type(result).__name__}; expected a Validation "
        f"or a dict {{'valid': bool, 'errors': [...]}}"
    )


async def run_validators(validators: Sequence[Callable[[Any], Any]], output: Any) -> Validation:
    """Run every validator on ``output`` and merge their errors.

    Raises:
        ParserContractError: A validator raised or broke its contract.
    """
    errors: list[str] = []
    for validator in validators:
        try:
            result = validator(output)
            if inspect.isawaitable(result):
                result = await result
        except Exception as exc:
            raise ParserContractError(
                f"validator {_name(validator)!r} raised {type(exc).__name__}: {exc}"
            ) from exc
        verdict = coerce_validation(result, _name(validator))
        if not verdict.valid:
            errors.extend(verdict.errors or (f"{_name(validator)} rejected the output",))
    return Validation(not errors, tuple(errors))
