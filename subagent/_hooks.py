"""The loop's one seam: :class:`RunHook`, and the per-method dispatch the loop reads.

Extensions of a run (approval of tool calls, usage limits, ``on_state``) are hooks: each
overrides the methods it needs, and the loop calls each method at one place of a turn::

    before_call()          before the model is called      -> a reason to end the run
    after_reply(response)  when its reply is in             -> a reason to end the run
    before_tools(batch)    before a turn's tool calls run   -> pause, or a reason to end
    after_turn(snapshot)   after a turn that left the run going on (or paused)
    enter_user_code()      around a tool call or validator  -> a token for leave_user_code

:class:`Hooks` indexes a run's hooks by the methods they override (as trio's instruments
are), so a method no hook overrides costs the loop one truthiness test and nothing else.
The order of a run's hooks is fixed by the agent (approval before limits: the limits count
only the calls that will run); the loop calls them in that order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from subagent.llm import LLMResponse, ToolCall
from subagent.records import Decision, RunState, ToolResult

__all__ = ["NO_HOOKS", "Hooks", "Pause", "RunHook", "ToolBatch"]


@dataclass(slots=True)
class ToolBatch:
    """The tool calls of one turn, as the tool stage is about to run them.

    Attributes:
        calls: The calls as the model asked for them (what the turn records).
        running: The calls that run, in the same positions (an approver's edit replaces
            one here, never in ``calls``).
        limit: How many calls of one reply may run; the calls past it are refused.
        preset: Results of calls that do not run (denied), by position.
        resumed: Whether the turn paused for approval and goes on now.
        decisions: On a resumed turn, the decision about each call that needed one.
        notes: What the model is told with a call's result, by position (an approver's
            edit).
    """

    calls: list[ToolCall]
    running: list[ToolCall]
    limit: int
    preset: dict[int, ToolResult] = field(default_factory=dict)
    resumed: bool = False
    decisions: Mapping[str, Decision] = field(default_factory=dict)
    notes: dict[int, str] = field(default_factory=dict)

    @property
    def to_run(self) -> int:
        """How many calls will run: those within the limit, not preset."""
        within = min(len(self.running), self.limit)
        return within - sum(1 for position in self.preset if position < within)


@dataclass(frozen=True, slots=True)
class Pause:
    """A hook's answer to a batch: pause the run before any call runs.

    Attributes:
        waiting: The ids of the calls that need a decision.
    """

    waiting: list[str]


class RunHook:
    """A seam of the turn loop. Override the methods you need; the others are never called.

    One hook object serves one run (it may keep that run's books).
    """

    __slots__ = ()

    def before_call(self) -> str | None:
        """Before each model call: why the run must end instead (``None``: go on)."""
        return None

    def after_reply(self, response: LLMResponse) -> str | None:
        """When a reply is in: why the run must end with it (``None``: judge it)."""
        return None

    def before_tools(self, batch: ToolBatch) -> Pause | str | None:
        """Before a turn's calls run: pause, end the run (a reason), or go on (``None``).

        May change ``batch`` (an edited call in ``running``, a denied one in ``preset``).
        """
        return None

    def after_turn(self, snapshot: Callable[[], RunState]) -> None:
        """After a turn that left the run going on or paused; ``snapshot()`` is its state."""

    def enter_user_code(self) -> Any:
        """Before a tool call or a validator runs: a token for :meth:`leave_user_code`."""
        return None

    def leave_user_code(self, token: Any) -> None:
        """After it ran (``token`` is what :meth:`enter_user_code` returned)."""


def _overrides(hook: RunHook, name: str) -> bool:
    return getattr(type(hook), name) is not getattr(RunHook, name)


class Hooks:
    """A run's hooks, indexed by the methods they override (each a tuple, in order)."""

    __slots__ = ("after_reply", "after_turn", "before_call", "before_tools", "user_code")

    def __init__(self, hooks: Sequence[RunHook] = ()):
        def bound(name: str) -> tuple[Callable[..., Any], ...]:
            return tuple(getattr(hook, name) for hook in hooks if _overrides(hook, name))

        self.before_call: tuple[Callable[[], str | None], ...] = bound("before_call")
        self.after_reply: tuple[Callable[[LLMResponse], str | None], ...] = bound("after_reply")
        self.before_tools: tuple[Callable[[ToolBatch], Pause | str | None], ...] = bound(
            "before_tools"
        )
        self.after_turn: tuple[Callable[[Callable[[], RunState]], None], ...] = bound("after_turn")
        self.user_code: tuple[RunHook, ...] = tuple(
            hook for hook in hooks if _overrides(hook, "enter_user_code")
        )

    def __bool__(self) -> bool:
        return bool(
            self.before_call or self.after_reply or self.before_tools or self.after_turn
            or self.user_code
        )  # fmt: skip


NO_HOOKS = Hooks()
"""The hooks of a run that has none (shared)."""
