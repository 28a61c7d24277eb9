"""``run(on_state=...)`` as a hook of the loop: the run's state, after each turn."""

from __future__ import annotations

import inspect
from collections.abc import Callable

from subagent._errors import blame_callback
from subagent._hooks import RunHook
from subagent.observe._observer import refuse_awaitable
from subagent.records import RunState

__all__ = ["StateHook"]


class StateHook(RunHook):
    """Hands the run's state to ``on_state`` after each turn that leaves it going on.

    Also when the turn paused the run. An exception ``on_state`` raises ends the run,
    raised as it is.
    """

    __slots__ = ("_on_state",)

    def __init__(self, on_state: Callable[[RunState], object]):
        self._on_state = on_state

    def after_turn(self, *, state: RunState) -> None:  # type: ignore[override]
        try:
            returned = self._on_state(state)
        except Exception as exc:
            blame_callback(exc, "on_state")
            raise
        if returned is not None and inspect.isawaitable(returned):
            refuse_awaitable("on_state", returned)
