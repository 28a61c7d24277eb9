"""The ReAct protocol: tools described in the prompt, one action per reply, read from text.

For models without reliable native tool calling. The system prompt lists the tools with the
JSON schema of their input and asks for ``Thought:`` then exactly one ``Action: {...}`` or
``Final Answer: ...``; :func:`~subagent.protocols.read_react_reply` reads it tolerantly. A
tool turn is kept in the conversation as the reply (with its action) and an
``Observation:`` message with the results. Everything else (the phase machine, budgets,
stripping, collapse, traces) is the same as with native tool calls.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from subagent._templates import TemplateSet
from subagent.llm import LLMResponse, Message, ToolCall, ToolDefinition
from subagent.parsers import OutputContract
from subagent.protocols._action import read_react_reply
from subagent.protocols._protocol import ProtocolName, Reading
from subagent.records import ToolResult
from subagent.records._messages import assistant_message

__all__ = ["REACT", "ReactProtocol"]

# Any mention of an action: without one, a reply where tools are not offered is the answer.
_ACTION_MENTION = re.compile(r"\baction\b", re.IGNORECASE)


class ReactProtocol:
    """Tools in the prompt, one ``Action:`` or ``Final Answer:`` per reply."""

    __slots__ = ()

    @property
    def name(self) -> ProtocolName:
        return "react"

    @property
    def native_tools(self) -> bool:
        return False

    def system_prompt(
        self,
        templates: TemplateSet,
        agent_name: str,
        tools: Sequence[ToolDefinition],
        contract: OutputContract,
        *,
        allow_fail: bool = True,
    ) -> str:
        listed = [
            {"name": tool.name, "description": tool.description,
             "schema": json.dumps(tool.parameters, separators=(",", ":"))}
            for tool in tools
        ]  # fmt: skip
        return templates.render(
            "react_system", agent_name=agent_name, has_tools=bool(listed), tools=listed,
            example_tool=tools[0].name if tools else "",
            example_input=_example_input(tools[0].parameters) if tools else "{}",
            answer_format=contract.answer_format(templates), allow_fail=allow_fail,
        )  # fmt: skip

    def read(
        self, response: LLMResponse, offered: Collection[str], templates: TemplateSet
    ) -> Reading:
        if response.tool_calls:  # a server that parsed an action into a native call
            return Reading(calls=response.tool_calls)
        text = response.text
        reply = read_react_reply(text)
        if reply.kind == "action":
            return Reading(calls=(ToolCall(name=reply.tool, arguments=reply.arguments),))
        if reply.kind == "answer":
            return Reading(answer=reply.answer)
        bare = _bare_action(text, offered)
        if bare is not None:
            return Reading(calls=(bare,))
        if not offered and not _ACTION_MENTION.search(text):
            # Where no tool can be called, a reply without the final-answer marker can only
            # be the answer: the output contract judges it (a strict protocol would spend a
            # correction on the missing marker alone).
            return Reading(answer=text)
        return Reading(problem=templates.render("react_invalid", problem=reply.problem))

    def tool_exchange(
        self,
        response: LLMResponse,
        calls: Sequence[ToolCall],
        results: Sequence[ToolResult],
        templates: TemplateSet,
    ) -> list[Message]:
        observation = templates.render(
            "react_observation", results=[{"content": result.content} for result in results]
        )
        return [
            Message(role="assistant", content=response.text),
            Message(role="user", content=observation),
        ]

    def failed_reply(self, response: LLMResponse) -> Message:
        return assistant_message(response.text)


def _bare_action(text: str, offered: Collection[str]) -> ToolCall | None:
    """An action written without its ``Action:`` marker (small models do this).

    A whole reply that is the object ``{"tool": <an offered tool>, "input": {...}}``. Only a
    tool name the turn offers counts: an answer with a ``tool`` key is not taken for a call.
    """
    if not offered or "{" not in text:
        return None
    reply = read_react_reply(f"Action: {text.strip()}")
    if reply.kind != "action" or reply.tool not in offered or reply.extra_actions:
        return None
    return ToolCall(name=reply.tool, arguments=reply.arguments)


REACT = ReactProtocol()


_PLACEHOLDERS: dict[str, Any] = {"integer": 1, "number": 1.5, "boolean": True, "array": [],
                                 "object": {}, "null": None}  # fmt: skip


def _example_input(schema: Mapping[str, Any]) -> str:
    """An input for the prompt's example: the tool's own argument names, valid JSON.

    A small model copies the example's input literally; ``{...}`` (the old example) is not
    JSON, so the copy failed to parse. Required arguments first, at most three; an enum shows
    its first value, a string a ``"<name>"`` placeholder, other types a value of that type.
    """
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return "{}"
    required = [name for name in schema.get("required") or () if name in properties]
    names = [*required, *(name for name in properties if name not in required)][:3]
    example: dict[str, Any] = {}
    for name in names:
        spec = properties[name] if isinstance(properties[name], Mapping) else {}
        kind = spec.get("type")
        if isinstance(spec.get("enum"), list) and spec["enum"]:
            example[name] = spec["enum"][0]  # a copied placeholder still validates
        elif isinstance(kind, str) and kind in _PLACEHOLDERS:
            example[name] = _PLACEHOLDERS[kind]
        else:
            example[name] = f"<{name}>"
    return json.dumps(example)
