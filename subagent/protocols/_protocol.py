"""How a reply becomes tool calls, an answer, or a problem: the protocol of an agent.

Both protocols run under the same phase machine, budgets, stripping and collapse; only the
wire differs. ``native`` uses the model's own tool calling (schemas in the request, calls in
the response); ``react`` describes the tools in the system prompt and reads one action per
reply from the text.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from subagent._templates import TemplateSet
from subagent.llm import LLMResponse, Message, ToolCall, ToolDefinition
from subagent.parsers import OutputContract
from subagent.records import ToolResult

__all__ = ["ProtocolName", "Reading", "ReplyProtocol"]

ProtocolName = Literal["native", "react"]


@dataclass(frozen=True, slots=True)
class Reading:
    """What a protocol read in a reply: tool calls, an answer attempt, or a problem.

    Attributes:
        calls: The tool calls the reply asks for (none when it is an answer).
        answer: The return attempt's text (``None`` when the reply calls tools or is
            unreadable).
        problem: What is wrong with an unreadable reply: the feedback for the model.
    """

    calls: Sequence[ToolCall] = ()
    answer: str | None = None
    problem: str | None = None


class ReplyProtocol(Protocol):
    """The part of a run that depends on how tools travel: in the request, or in the text."""

    @property
    def name(self) -> ProtocolName:
        """The protocol's name (``SubAgent(protocol=...)``)."""
        ...

    @property
    def native_tools(self) -> bool:
        """Whether tool schemas go in the request (``tools=``) rather than the prompt."""
        ...

    def system_prompt(
        self,
        templates: TemplateSet,
        agent_name: str,
        tools: Sequence[ToolDefinition],
        contract: OutputContract,
        *,
        allow_fail: bool = True,
    ) -> str:
        """The system prompt; ``tools`` is empty where tools are not offered.

        ``allow_fail``: whether it offers the explicit fail (``{"fail": "<why>"}``).
        """
        ...

    def read(
        self, response: LLMResponse, offered: Collection[str], templates: TemplateSet
    ) -> Reading:
        """What ``response`` (its reasoning already set apart) asks for.

        ``offered``: the names of the tools this turn offers (none outside ``normal``). A
        problem is the feedback for the model, rendered with ``templates``.
        """
        ...

    def tool_exchange(
        self,
        response: LLMResponse,
        calls: Sequence[ToolCall],
        results: Sequence[ToolResult],
        templates: TemplateSet,
    ) -> list[Message]:
        """The messages that keep a tool turn in the conversation (never collapsed)."""
        ...

    def failed_reply(self, response: LLMResponse) -> Message:
        """A failed attempt as the assistant said it, for the conversation."""
        ...
