"""The native protocol: tool schemas in the request, tool calls in the response."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from subagent._records import ToolResult
from subagent._templates import TemplateSet
from subagent.llm import LLMResponse, Message, ToolCall, ToolDefinition
from subagent.parsers import OutputContract
from subagent.protocols._protocol import ProtocolName, Reading

__all__ = ["NATIVE", "NativeProtocol"]


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
    ) -> str:
        listed = [{"name": tool.name, "description": tool.description} for tool in tools]
        return templates.render(
            "system", agent_name=agent_name, has_tools=bool(listed), tools=listed,
            output_instructions=contract.instructions(templates),
        )  # fmt: skip

    def read(
        self, response: LLMResponse, offered: Collection[str], templates: TemplateSet
    ) -> Reading:
        if response.tool_calls:
            return Reading(calls=response.tool_calls)
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
        return Message(role="assistant", content=text)


NATIVE = NativeProtocol()
