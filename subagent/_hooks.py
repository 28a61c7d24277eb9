"""The loop's one seam: :class:`RunHook`, public, and the dispatch the loop reads.

A run's extensions are hooks: the library's own (approval of tool calls, usage limits,
``on_state``) and yours (``SubAgent(hooks=[...])``, ``run(hooks=[...])``). A hook overrides
the methods it needs, and the loop calls each method at one place of a run::

    before_run(messages, run)             once, before the first call -> a reason to refuse
    before_call(run)                      before the model is called -> a reason to end
    after_reply(response, model, run)     when its reply is in       -> a reason to end
    before_tools(batch, run)              before a turn's calls run  -> pause, or end
    after_tools(batch, results, run)      when they ran (or were refused)
    after_turn(turn, state, run)          after a turn that left the run going on (or paused)

Each method is called with keyword arguments, and only with those its signature names (or
all of them, given ``**kwargs``): a hook asks for what it uses, and an argument added
later breaks no hook. ``run`` (a :class:`~subagent.RunContext`) and ``state`` (the run's
:class:`~subagent.RunState`) are made only for a hook that asks for them.

:class:`Hooks` indexes a run's hooks by the methods they override (as trio's instruments
are), so a method no hook overrides costs the loop one truthiness test and nothing else.
The order is fixed: approval, usage limits, the agent's hooks, the run's hooks, then
``on_state``; the loop calls each method in that order.

:class:`InputGuardrail` is a hook made of one function: its ``before_run``.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from subagent._context import RunContext
from subagent._errors import ConfigurationError, blame_user_code
from subagent.llm import LLMResponse, Message, ToolCall
from subagent.records import Decision, RunState, ToolResult, Turn

__all__ = ["NO_HOOKS", "Hooks", "InputGuardrail", "Pause", "RunHook", "ToolBatch"]


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
    """Extend a run at fixed points of its turns: override the methods you need.

    The loop calls each method with keyword arguments, only those the method names (a
    method with ``**kwargs`` gets them all), so write ``def after_tools(self, *, results,
    **_)`` and a later argument breaks nothing. A method the hook does not override is never
    called and costs nothing. An exception a method raises ends the run and is raised out
    of it as it is, with the run's turns (the one it broke included) in ``.turns``.

    A hook given to the agent serves all its runs, at once: keep no one run's books in it,
    or give each run a hook of its own with ``run(hooks=[...])``.

    The arguments, by name:

    - ``messages``: the task's messages as the run starts (its rendered prompt, or the
      messages given, after any ``message_history``; no system message);
    - ``run``: the :class:`~subagent.RunContext` of the turn (the agent, turn number,
      phase, usage and tool calls so far, the run's deps);
    - ``response``: the model's :class:`~subagent.LLMResponse`;
    - ``model``: the configured name (``model_name``) of the model that produced it: of
      a :class:`~subagent.FallbackLLM`, the one that answered; on a correction turn with
      its own model, that model (``None`` for a model that names none);
    - ``batch``: the turn's :class:`ToolBatch` (its calls, the ones that will run);
    - ``results``: the :class:`~subagent.ToolResult` of each call of the batch, in order;
    - ``turn``: the :class:`~subagent.Turn` just recorded;
    - ``state``: the run's :class:`~subagent.RunState` after that turn (made only when
      asked for: a state holds the whole conversation).
    """

    __slots__ = ()

    def before_run(
        self, *, messages: Sequence[Message], run: RunContext[Any]
    ) -> str | Awaitable[str | None] | None:
        """Once, before a run's first model call: why the task is refused (``None``: go on).

        May be ``async``. A reason ends the run ``failed(input_refused)`` with it as the
        message, before any model call and with no turn. Not called when a paused run
        resumes (its task was checked when it started). ``run.turn`` is 0.
        """
        return None

    def before_call(self, *, run: RunContext[Any]) -> str | None:
        """Before each model call: why the run must end instead (``None``: go on).

        A reason ends the run ``failed(usage_limit)`` with it, before the call is sent.
        """
        return None

    def after_reply(
        self, *, response: LLMResponse, model: str | None, run: RunContext[Any]
    ) -> str | None:
        """When a reply is in: why the run must end with it (``None``: judge it)."""
        return None

    def before_tools(self, *, batch: ToolBatch, run: RunContext[Any]) -> Pause | str | None:
        """Before a turn's calls run: pause, end the run (a reason), or go on (``None``).

        May change ``batch`` (an edited call in ``running``, a denied one in ``preset``).
        """
        return None

    def after_tools(
        self, *, batch: ToolBatch, results: Sequence[ToolResult], run: RunContext[Any]
    ) -> None:
        """When a turn's calls ran: each call's result, in the batch's order."""

    def after_turn(self, *, turn: Turn, state: RunState, run: RunContext[Any]) -> None:
        """After a turn that left the run going on or paused (not after its last turn)."""

    def enter_user_code(self) -> Any:
        """Before a tool call or a validator runs: a token for :meth:`leave_user_code`."""
        return None

    def leave_user_code(self, token: Any) -> None:
        """After it ran (``token`` is what :meth:`enter_user_code` returned)."""


def _overrides(hook: RunHook, name: str) -> bool:
    return getattr(type(hook), name) is not getattr(RunHook, name)


# Each seam's arguments, in the order the loop passes them. A thunk (a function of no
# arguments) stands for ``run`` and ``state``: made only for a hook that asks for them.
_ARGUMENTS: dict[str, tuple[str, ...]] = {
    "before_run": ("messages", "run"),
    "before_call": ("run",),
    "after_reply": ("response", "model", "run"),
    "before_tools": ("batch", "run"),
    "after_tools": ("batch", "results", "run"),
    "after_turn": ("turn", "state", "run"),
}
_MADE_WHEN_ASKED = frozenset({"run", "state"})


# Per hook class and method: the arguments it names, each with its position among the
# seam's and whether it is made when asked (signatures read once, not per run).
_WANTED: dict[tuple[type, str], tuple[tuple[int, str, bool], ...]] = {}


def _wanted(
    method: Callable[..., Any], where: str, offered: tuple[str, ...]
) -> tuple[tuple[int, str, bool], ...]:
    """What ``method`` asks for among ``offered``: all, given ``**kwargs``.

    Raises:
        ConfigurationError: It requires an argument ``offered`` does not hold.
    """
    parameters = inspect.signature(method).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        names = offered
    else:
        named = {p.name for p in parameters}
        names = tuple(argument for argument in offered if argument in named)
        required = [p.name for p in parameters if p.default is inspect.Parameter.empty
                    and p.kind is not inspect.Parameter.VAR_POSITIONAL]  # fmt: skip
        missing = [argument for argument in required if argument not in offered]
        if missing:
            raise ConfigurationError(
                "hooks", f"{where}() asks for {missing}, which it is not given (its "
                f"arguments: {', '.join(offered)}, by keyword)"
            )  # fmt: skip
    return tuple((offered.index(a), a, a in _MADE_WHEN_ASKED) for a in names)


def _caller(hook: RunHook, name: str) -> Callable[..., Any]:
    """``hook``'s method ``name`` as the loop calls it (every argument, by position).

    The method gets, by keyword, those it names.

    Raises:
        ConfigurationError: The method asks for an argument its seam does not give.
    """
    method = getattr(hook, name)
    key = (type(hook), name)
    wanted = _WANTED.get(key)
    if wanted is None:
        wanted = _wanted(method, f"{type(hook).__name__}.{name}", _ARGUMENTS[name])
        if len(_WANTED) < 1024:
            _WANTED[key] = wanted
    # An input guardrail is named by its check: a run may have several.
    named = repr(hook) if isinstance(hook, InputGuardrail) else type(hook).__name__
    where = f"the hook {named}.{name}"

    def call(*values: Any) -> Any:
        kwargs = {argument: values[index]() if made else values[index]
                  for index, argument, made in wanted}  # fmt: skip
        try:
            return method(**kwargs)
        except Exception as exc:
            raise blame_user_code(exc, where) from None

    if name != "before_run":
        return call

    async def screen(*values: Any) -> str | None:
        answer = call(*values)
        if inspect.isawaitable(answer):
            try:
                answer = await answer
            except Exception as exc:
                raise blame_user_code(exc, where) from None
        if answer is None or isinstance(answer, str):
            return answer
        refused = TypeError(
            f"{where} returned {answer!r}: return why the task is refused (a str), or None "
            f"to let the run go on"
        )
        raise blame_user_code(refused, where)

    return screen


class Hooks:
    """A run's hooks, indexed by the methods they override (each a tuple, in order).

    Raises:
        ConfigurationError: A hook is not a :class:`RunHook`, or one of its methods asks
            for an argument its seam does not give (found when the run starts).
    """

    __slots__ = ("after_reply", "after_tools", "after_turn", "before_call", "before_run",
                 "before_tools", "user_code")  # fmt: skip

    def __init__(self, hooks: Sequence[RunHook] = ()):
        for hook in hooks:
            if not isinstance(hook, RunHook):
                raise ConfigurationError(
                    "hooks", f"{hook!r} is not a RunHook (subclass subagent.RunHook)"
                )

        def bound(name: str) -> tuple[Callable[..., Any], ...]:
            return tuple(_caller(hook, name) for hook in hooks if _overrides(hook, name))

        self.before_run = bound("before_run")  # each an async function
        self.before_call = bound("before_call")
        self.after_reply = bound("after_reply")
        self.before_tools = bound("before_tools")
        self.after_tools = bound("after_tools")
        self.after_turn = bound("after_turn")
        self.user_code: tuple[RunHook, ...] = tuple(
            hook for hook in hooks if _overrides(hook, "enter_user_code")
        )

    def __bool__(self) -> bool:
        return bool(
            self.before_run or self.before_call or self.after_reply or self.before_tools
            or self.after_tools or self.after_turn or self.user_code
        )  # fmt: skip


NO_HOOKS = Hooks()
"""The hooks of a run that has none (shared)."""


class InputGuardrail(RunHook):
    """A check of a run's task before the model sees it: a hook made of one function.

    ``check`` is called once per run, before its first model call, with the keyword
    arguments it names (as a hook's methods are): ``messages``, the task's messages, and
    ``run``, the run's :class:`~subagent.RunContext` (its ``deps``). It returns why the task
    is refused, or ``None`` to let the run go on; it may be ``async`` (a check that asks a
    cheaper model). A refusal ends the run ``failed(input_refused)``, the reason its
    message, with no model call and no turn. A check that raises is raised out of the run
    as it is. Give it to the agent (``SubAgent(hooks=[...])``) or to one run
    (``run(hooks=[...])``), like any hook; several run in their order, the first refusal
    ends the run.

    Args:
        check: ``(messages, run) -> str | None``, or ``async``; it names only the
            arguments it uses (``**kwargs`` takes both).

    Raises:
        ConfigurationError: ``check`` is not callable, or asks for an argument other than
            ``messages`` and ``run`` (field ``hooks``).

    Attributes:
        check: The function, as given.

    Example::

        def no_homework(messages):
            if "homework" in messages[-1].content:
                return "homework is not what this agent is for"
            return None

        agent = SubAgent(..., hooks=[InputGuardrail(no_homework)])
    """

    __slots__ = ("_names", "check")

    def __init__(self, check: Callable[..., str | Awaitable[str | None] | None]) -> None:
        if not callable(check):
            raise ConfigurationError("hooks", f"InputGuardrail needs a function, got {check!r}")
        wanted = _wanted(check, f"InputGuardrail({_name_of(check)})", _ARGUMENTS["before_run"])
        self.check = check
        self._names = tuple(argument for _, argument, _ in wanted)

    def before_run(
        self, *, messages: Sequence[Message], run: RunContext[Any]
    ) -> str | Awaitable[str | None] | None:
        """The check's answer about the task (see the class)."""
        given = {"messages": messages, "run": run}
        return self.check(**{name: given[name] for name in self._names})

    def __repr__(self) -> str:
        return f"InputGuardrail({_name_of(self.check)})"


def _name_of(function: Callable[..., Any]) -> str:
    """A function's name as written (``Screen.check``, ``no_homework``, ``<lambda>``)."""
    name = getattr(function, "__qualname__", None)
    return repr(function) if not isinstance(name, str) else name.rpartition("<locals>.")[2]
