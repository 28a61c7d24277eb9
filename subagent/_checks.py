"""Checks on configuration values: budgets, counts, durations.

Shared by every constructor that takes them; each raises a
:class:`~subagent.ConfigurationError` naming the field, the value and its type.
"""

from __future__ import annotations

import math

from subagent._errors import ConfigurationError

__all__ = ["check_bool", "check_int", "check_number", "check_seconds"]


def check_bool(name: str, value: object) -> bool:
    """``value`` if it is a ``bool``.

    Raises:
        ConfigurationError: Otherwise, naming the field and the value.
    """
    if not isinstance(value, bool):
        raise ConfigurationError(name, f"must be a bool, got {value!r}")
    return value


def check_int(name: str, value: object, minimum: int) -> int:
    """``value`` if it is an ``int`` (not a ``bool``) of at least ``minimum``.

    Raises:
        ConfigurationError: Otherwise, naming the field, the value and its type.
    """
    if type(value) is not int or value < minimum:
        kind = type(value).__name__
        raise ConfigurationError(name, f"must be an integer >= {minimum}, got {value!r} ({kind})")
    return value


def check_number(
    name: str, value: object, minimum: float, *, exclusive: bool = False, unit: str = ""
) -> float:
    """``value`` as a float: a finite real number (not a ``bool``) >= ``minimum``.

    With ``exclusive``, it must be above ``minimum``. ``unit`` names what the number counts
    (``"seconds"``) in the message.

    Raises:
        ConfigurationError: Otherwise (NaN and infinities included), naming the field.
    """
    bound = f"> {minimum:g}" if exclusive else f">= {minimum:g}"
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < minimum
        or (exclusive and value == minimum)
    ):
        kind = type(value).__name__
        what = f"a number of {unit}" if unit else "a finite number"
        raise ConfigurationError(name, f"must be {what} {bound}, got {value!r} ({kind})")
    return float(value)


def check_seconds(name: str, value: object, *, allow_zero: bool = False) -> float | None:
    """``value`` as seconds: ``None`` (no limit), or a finite number > 0.

    With ``allow_zero``, 0 is accepted too.

    Raises:
        ConfigurationError: Otherwise, naming the field.
    """
    if value is None:
        return None
    return check_number(name, value, 0.0, exclusive=not allow_zero, unit="seconds")
