"""Running the model's tool calls: validated arguments in, the text the model sees out.

A call never raises out of here (cancellation aside): an unknown tool, arguments that do not
fit, or an exception from the tool all become a failed :class:`~subagent.ToolResult` whose
content is the feedback the model reads on its next turn. Tool output and error text are
fenced as data.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from subagent._records import ToolResult
from subagent._templates import TemplateSet
from subagent._text import fence
from subagent.llm import ToolCall, ToolDefinition
from subagent.parsers import format_validation_errors
from subagent.tools._tool import Tool, ToolArgumentsError, render_result

__all__ = ["Toolbox"]


class Toolbox:
    """The tools of one agent, ready to run the model's calls.

    Args:
        tools: The tools by name.
        templates: The agent's templates (results and errors are rendered with them).
    """

    __slots__ = ("_templates", "definitions", "tools")

    def __init__(self, tools: Mapping[str, Tool], templates: TemplateSet):
        self.tools = tools
        self.definitions: list[ToolDefinition] = [tool.definition for tool in tools.values()]
        self._templates = templates

    def __bool__(self) -> bool:
        return bool(self.tools)

    async def run(self, call: ToolCall) -> ToolResult:
        """Run one call; failures become a failed result carrying the model's feedback."""
        templates = self._templates
        tool = self.tools.get(call.name)
        started = time.perf_counter()
        if tool is None:
            content = templates.render(
                "unknown_tool", name=call.name, available=", ".join(self.tools) or "none"
            )
            return ToolResult(call_id=call.id, name=call.name, ok=False, content=content,
                              error_type="unknown_tool")  # fmt: skip
        try:
            value = await tool.call(call.arguments)
        except ToolArgumentsError as exc:
            errors = (
                format_validation_errors(exc.validation)
                if exc.validation is not None
                else [{"location": "(arguments)", "message": str(exc), "received": ""}]
            )
            content = templates.render("tool_arguments_invalid", name=call.name, errors=errors)
            return ToolResult(call_id=call.id, name=call.name, ok=False, content=content,
                              error_type="invalid_arguments",
                              duration_s=time.perf_counter() - started)  # fmt: skip
        except Exception as exc:
            text = f"{type(exc).__name__}: {exc}"
            content = templates.render("tool_error", name=call.name, error=text, fence=fence(text))
            return ToolResult(call_id=call.id, name=call.name, ok=False, content=content,
                              error_type=type(exc).__name__,
                              duration_s=time.perf_counter() - started)  # fmt: skip
        text = render_result(value)
        content = templates.render("tool_result", name=call.name, content=text, fence=fence(text))
        return ToolResult(call_id=call.id, name=call.name, ok=True, content=content,
                          duration_s=time.perf_counter() - started)  # fmt: skip

    def refuse(self, calls: Sequence[ToolCall]) -> tuple[str, list[ToolResult]]:
        """The feedback for calls made where tools are not offered, and their results."""
        names = ", ".join(sorted({call.name for call in calls}))
        error = self._templates.render("tools_unavailable", tool_names=names)
        results = [
            ToolResult(call_id=call.id, name=call.name, ok=False, content=error,
                       error_type="tools_unavailable", duration_s=0.0)
            for call in calls
        ]  # fmt: skip
        return error, results
