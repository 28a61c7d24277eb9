"""Checks on configuration values, shared by every constructor that takes budgets or counts."""

from __future__ import annotations

from subagent._errors import ConfigurationError

__all__ = ["check_int"]


def check_int(name: str, value: object, minimum: int) -> int:
    """``value`` if it is an ``int`` (not a ``bool``) of at least ``minimum``.

    Raises:
        ConfigurationError: Otherwise, naming the field, the value and its type.
    """
    if type(value) is not int or value < minimum:
        kind = type(value).__name__
        raise ConfigurationError(name, f"must be an integer >= {minimum}, got {value!r} ({kind})")
    return value
