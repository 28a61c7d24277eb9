"""Running the model's tool calls: validated arguments in, the text the model sees out.

A call never raises out of here (cancellation aside): an unknown tool, arguments that do not
fit, a timeout, an exception from the tool, or a return value that cannot become text all
become a failed :class:`~subagent.ToolResult` whose content is the feedback the model reads
on its next turn. A call whose source went away (:class:`ToolSourceLostError`) is such a
result too, and its :class:`ToolRun` says so (``lost``): the loop then ends the run. Tool
output and error text are fenced as data, and a long result is cut to
:data:`TOOL_RESULT_LIMIT` characters before the model sees it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from subagent._context import RunContext
from subagent._templates import TemplateSet
from subagent._text import fence
from subagent.llm import ToolCall, ToolDefinition
from subagent.parsers import format_validation_errors
from subagent.records import ToolResult
from subagent.tools._source import ToolSourceLostError
from subagent.tools._tool import (
    NestedRunError,
    Tool,
    ToolArgumentsError,
    ToolOutput,
    ToolTimeoutError,
    render_result,
)

__all__ = ["TOOL_CALLS_PER_TURN", "TOOL_RECORD_LIMIT", "TOOL_RESULT_LIMIT", "ToolRun", "Toolbox"]

TOOL_RESULT_LIMIT = 32_000
"""Characters of a tool's result the model is shown, its fences included (about 8,000
tokens); the rest is cut, with a note saying how much."""
TOOL_CALLS_PER_TURN = 32
"""Tool calls of one reply that are run; the calls past it are refused, never run."""
TOOL_RECORD_LIMIT = 1_000_000
"""Characters of a cut result kept whole on the :class:`~subagent.ToolResult` record
(``full_output``); a longer one keeps only what the model saw."""


@dataclass(slots=True)
class ToolRun:
    """One call's record, and what the run needs from it beyond the record.

    Attributes:
        result: The call's record (also what the model reads).
        final: The tool returned ``ToolOutput(final=True)``: ``value`` is a candidate answer.
        value: The final value (when ``final``).
        extras: Objects for the next tool turn's calls (never shown to the model).
        lost: Why the call's source went away (naming the tool and the source), when it
            did: the run ends ``failed(tool_server_lost)`` after this turn.
    """

    result: ToolResult
    final: bool = False
    value: Any = None
    extras: Mapping[str, Any] | None = None
    lost: str | None = None


class Toolbox:
    """The tools of one agent, ready to run the model's calls.

    Args:
        tools: The tools by name.
        templates: The agent's templates (results and errors are rendered with them).
        prune_unknown_args: The default for tools that do not set their own.
        result_limit: Characters of a result the model is shown.
        record_limit: Characters of a cut result kept whole on its record.
        call_limit: Tool calls of one reply that are run (:meth:`over_limit` refuses the
            rest).
    """

    __slots__ = ("_prune", "_record_limit", "_result_limit", "_templates", "call_limit",
                 "definitions", "tools", "wants_context")  # fmt: skip

    def __init__(
        self,
        tools: Mapping[str, Tool],
        templates: TemplateSet,
        *,
        prune_unknown_args: bool = True,
        result_limit: int = TOOL_RESULT_LIMIT,
        record_limit: int = TOOL_RECORD_LIMIT,
        call_limit: int = TOOL_CALLS_PER_TURN,
    ):
        self.tools = tools
        self.definitions: list[ToolDefinition] = [tool.definition for tool in tools.values()]
        self._templates = templates
        self._prune = prune_unknown_args
        self._result_limit = result_limit
        self._record_limit = record_limit
        self.call_limit = call_limit
        # Whether a tool takes a RunContext: the run builds one per tool turn only then.
        self.wants_context = any(tool.takes_context for tool in tools.values())

    def __bool__(self) -> bool:
        return bool(self.tools)

    @property
    def prune_default(self) -> bool:
        """The pruning rule of tools that set none."""
        return self._prune

    @property
    def result_limit(self) -> int:
        """Characters of a result the model is shown."""
        return self._result_limit

    async def run(
        self,
        call: ToolCall,
        extras: Mapping[str, Any] | None = None,
        context: RunContext[Any] | None = None,
        *,
        last_tool_turn: bool = False,
    ) -> ToolRun:
        """Run one call; failures become a failed result carrying the model's feedback.

        ``context`` goes to a tool that takes a :class:`~subagent.RunContext`.
        ``last_tool_turn``: no later turn offers tools, so a call with invalid arguments
        is not told to call again.
        """
        tool = self.tools.get(call.name)
        if tool is None:
            content = self._templates.render(
                "unknown_tool", name=call.name, available=", ".join(self.tools) or "none"
            )
            return ToolRun(self._failed(call, content, "unknown_tool", 0.0))
        arguments = call.arguments
        pruned: list[str] = []
        prune = self._prune if tool.prune_unknown_args is None else tool.prune_unknown_args
        if prune and isinstance(arguments, Mapping):
            arguments, pruned = tool.prune(arguments)
        started = time.perf_counter()
        try:
            returned = await tool.call(arguments, extras, context)
        except Exception as exc:
            return self._raised(call, exc, started, pruned, last_tool_turn)
        output = returned if isinstance(returned, ToolOutput) else None
        value = output.value if output is not None else returned
        try:
            text = render_result(value)
        except Exception as exc:
            text = (
                f"the tool returned a value that cannot be turned into text "
                f"({type(exc).__name__}: {exc})"
            )
            return ToolRun(self._error(call, text, "unserializable_result", started, pruned))
        result = self._result(call, text, started, pruned)
        if output is None:
            return ToolRun(result)
        if output.step is not None:
            result = result.model_copy(update={"step": output.step})
        return ToolRun(result, output.final, value, output.extras or None)

    def _raised(
        self,
        call: ToolCall,
        exc: Exception,
        started: float,
        pruned: list[str],
        last_tool_turn: bool,
    ) -> ToolRun:
        """What a call that raised comes to: its failed result, told to the model."""
        if isinstance(exc, ToolArgumentsError):
            if exc.items:
                errors = exc.items
            elif exc.validation is not None:
                errors = format_validation_errors(exc.validation)
            else:
                errors = [{"location": "(arguments)", "message": str(exc), "received": ""}]
            content = self._templates.render(
                "tool_arguments_invalid", name=call.name, errors=errors,
                call_again=not last_tool_turn,
            )  # fmt: skip
            return ToolRun(self._failed(call, content, "invalid_arguments", started, pruned))
        if isinstance(exc, ToolTimeoutError):
            return ToolRun(self._error(call, str(exc), "timeout", started, pruned))
        if isinstance(exc, TimeoutError):
            # Raised by the tool itself (a socket, urlopen, wait_for inside it): its own
            # error, not the tool's time limit, and never out of the run.
            detail = f": {exc}" if str(exc) else ""
            text = f"TimeoutError{detail} (an operation inside the tool timed out)"
            return ToolRun(self._error(call, text, "TimeoutError", started, pruned))
        if isinstance(exc, NestedRunError):
            result = self._error(call, str(exc), "agent_failed", started, pruned)
            return ToolRun(result.model_copy(update={"step": exc.step}))
        if isinstance(exc, ToolSourceLostError):
            result = self._error(call, str(exc), "tool_server_lost", started, pruned)
            return ToolRun(result, lost=f"tool {call.name!r}: {exc}")
        text = f"{type(exc).__name__}: {exc}"
        return ToolRun(self._error(call, text, type(exc).__name__, started, pruned))

    def refuse(self, calls: Sequence[ToolCall]) -> tuple[str, list[ToolResult]]:
        """The feedback for calls made where tools are not offered, and their results."""
        names = ", ".join(sorted({call.name for call in calls}))
        error = self._templates.render("tools_unavailable", tool_names=names)
        return error, [self._failed(call, error, "tools_unavailable", 0.0) for call in calls]

    def over_limit(self, calls: Sequence[ToolCall]) -> list[ToolResult]:
        """The refused results of the calls of one reply past :attr:`call_limit` (in order).

        ``calls`` are all the reply's calls; the first :attr:`call_limit` get no result here
        (they run), each later one a failed ``too_many_calls`` result telling the model that
        only the first ones ran.
        """
        limit, count = self.call_limit, len(calls)
        refused: list[ToolResult] = []
        for call in calls[limit:]:
            content = self._templates.render(
                "tool_calls_over_limit", name=call.name, count=count, limit=limit
            )
            refused.append(self._failed(call, content, "too_many_calls", 0.0))
        return refused

    # --- records ---

    def _result(self, call: ToolCall, text: str, started: float, pruned: list[str]) -> ToolResult:
        shown, bars = _within(text, self._result_limit)
        cut = len(text) - len(shown)
        content = self._templates.render(
            "tool_result", name=call.name, content=shown, fence=bars, cut_chars=cut,
            total_chars=len(text),
        )  # fmt: skip
        full = text if cut and len(text) <= self._record_limit else None
        return ToolResult(call_id=call.id, name=call.name, ok=True, content=content,
                          duration_s=time.perf_counter() - started, pruned_arguments=pruned,
                          cut_chars=cut, full_output=full)  # fmt: skip

    def _error(
        self, call: ToolCall, text: str, error_type: str, started: float, pruned: list[str]
    ) -> ToolResult:
        text, bars = _within(text, self._result_limit)
        content = self._templates.render("tool_error", name=call.name, error=text, fence=bars)
        return self._failed(call, content, error_type, started, pruned)

    @staticmethod
    def _failed(
        call: ToolCall, content: str, error_type: str, started: float, pruned: Sequence[str] = ()
    ) -> ToolResult:
        duration = time.perf_counter() - started if started else 0.0
        return ToolResult(call_id=call.id, name=call.name, ok=False, content=content,
                          error_type=error_type, duration_s=duration,
                          pruned_arguments=list(pruned))  # fmt: skip


def _within(text: str, limit: int) -> tuple[str, str]:
    """The longest start of ``text`` that fits in ``limit`` characters with its two fences.

    A fence must be longer than any backtick run it encloses, so a result full of backticks
    would otherwise reach the model at up to three times the limit.
    """
    shown = text[:limit]
    while True:
        bars = fence(shown)
        room = max(0, limit - 2 * len(bars))
        if len(shown) <= room:
            return shown, bars
        shown = shown[:room]
