"""The native protocol: tool schemas in the request, tool calls in the response."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from subagent._templates import TemplateSet
from subagent.llm import LLMResponse, Message, ToolCall, ToolDefinition
from subagent.llm._text_calls import tool_calls_in_text
from subagent.parsers import OutputContract
from subagent.protocols._protocol import ProtocolName, Reading
from subagent.records import ToolResult
from subagent.records._messages import assistant_message

__all__ = ["NATIVE", "NativeProtocol", "call_written_as_text"]


def call_written_as_text(
    text: str, tool_names: Collection[str], templates: TemplateSet, *, offered: bool = True
) -> str | None:
    """What to tell the model when its reply is a tool call written as text; ``None`` if not.

    A reply whose whole text is a call of one of ``tool_names`` in a syntax models write
    (``{"name": ..., "arguments": {...}}``, a list of them, ``<tool_call>`` blocks,
    ``functions.NAME:`` lines; see :func:`~subagent.llm.tool_calls_in_text`) was meant as a
    call that the server did not return as one, and the adapter did not read as one
    (``OpenAIChat(text_tool_calls=False)``, or an adapter without that reading). The text
    (``tool_call_as_text``) names the tools called, for the model and for the run's failure.

    Args:
        text: The reply's text.
        tool_names: The agent's tools (a call of any other name is not recognised).
        templates: Where ``tool_call_as_text`` comes from.
        offered: Whether the tools are offered on this turn (the text then says to call
            them through tool calling; else, to answer).
    """
    if not tool_names:
        return None
    calls = tool_calls_in_text(text, tool_names)
    if not calls:
        return None
    names = ", ".join(dict.fromkeys(call.name for call in calls))
    return templates.render("tool_call_as_text", tool_names=names, offered=offered)


class NativeProtocol:
    """The model's own tool calling (OpenAI ``tools`` / ``tool_calls``)."""

    __slots__ = ()

    @property
    def name(self) -> ProtocolName:
        return "native"

    @property
    def native_tools(self) -> bool:
        return True

    def system_prompt(
        self,
        templates: TemplateSet,
        agent_name: str,
        tools: Sequence[ToolDefinition],
        contract: OutputContract,
        *,
        allow_fail: bool = True,
    ) -> str:
        listed = [{"name": tool.name, "description": tool.description} for tool in tools]
        return templates.render(
            "system", agent_name=agent_name, has_tools=bool(listed), tools=listed,
            output_instructions=contract.instructions(templates), allow_fail=allow_fail,
        )  # fmt: skip

    def read(
        self, response: LLMResponse, offered: Collection[str], templates: TemplateSet
    ) -> Reading:
        if response.tool_calls:
            return Reading(calls=response.tool_calls)
        # A call of an offered tool written as text is no answer: the model is told so.
        problem = call_written_as_text(response.text, offered, templates)
        if problem is not None:
            return Reading(problem=problem)
        return Reading(answer=response.text)

    def tool_exchange(
        self,
        response: LLMResponse,
        calls: Sequence[ToolCall],
        results: Sequence[ToolResult],
        templates: TemplateSet,
    ) -> list[Message]:
        assistant = Message(role="assistant", content=response.text, tool_calls=tuple(calls))
        return [assistant] + [
            Message(role="tool", content=result.content, tool_call_id=result.call_id,
                    name=result.name)
            for result in results
        ]  # fmt: skip

    def failed_reply(self, response: LLMResponse) -> Message:
        text = response.text
        if response.tool_calls:
            calls = "\n".join(f"[call {c.name}({c.arguments})]" for c in response.tool_calls)
            text = f"{text}\n{calls}" if text else calls
        return assistant_message(text)


NATIVE = NativeProtocol()
