"""Small text helpers shared by prompts and feedback."""

from __future__ import annotations

import re

__all__ = ["fence", "shorten"]

_BACKTICK_RUNS = re.compile(r"`+")


def fence(text: str) -> str:
    """A backtick fence longer than any backtick run in ``text``, so ``text`` cannot close it.

    Tool output and error text are shown to the model inside such a fence: data, not
    instructions.
    """
    longest = max((len(run) for run in _BACKTICK_RUNS.findall(text)), default=0)
    return "`" * max(3, longest + 1)


def shorten(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, marking the cut with an ellipsis."""
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "…"
