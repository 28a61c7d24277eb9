"""The peers on BFCL: pydantic-ai and the OpenAI Agents SDK, with their defaults.

``openai-agents-auto`` is the SDK with the one setting this server needs to call at all
(``tool_choice="auto"``, OpenAI's own default, which the SDK leaves unsent).

Runs in the peers' venv (``make bench-peers`` builds ``.venv-peers``). Each declares the
case's functions from their JSON schemas (pydantic-ai's ``Tool.from_schema``, the Agents
SDK's ``FunctionTool``; the SDK's strict-schema mode is turned off, as BFCL's schemas are
not strict), sends the question, and answers with the tool calls of the model's first
response, which is what BFCL grades (a call, not its result): the tools are never run.
Each answers with a :class:`~subagent.evals.SystemRun` (its calls as the output, the first
response as its one reply, the peer's own usage); a peer that raises is a failed run,
recorded as such and never graded as an answer (not even "no call" on ``irrelevance``).
"""

from __future__ import annotations

from typing import Any

from bfcl_data import Case, functions, openai_tools
from bfcl_systems import MAX_TOKENS, SEED, TEMPERATURE, Server, decoded_arguments

from subagent.evals import SystemReply, SystemRun

__all__ = ["run_peer"]


def _split(case: Case[Any]) -> tuple[str | None, str]:
    system = "\n\n".join(m["content"] for m in case.messages if m["role"] == "system") or None
    user = "\n\n".join(m["content"] for m in case.messages if m["role"] != "system")
    return system, user


def _first_response(calls: list[dict[str, Any]], text: str, usage: Any) -> SystemRun:
    """The run of a peer's first response (``usage``: the peer's own usage record)."""
    return SystemRun(
        output=calls,
        replies=[SystemReply(text=text, tool_calls=calls)],
        calls=usage.requests,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
    )


async def _pydantic_ai(case: Case[Any], server: Server) -> SystemRun:
    from pydantic_ai import Agent, Tool
    from pydantic_ai.messages import TextPart, ToolCallPart
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    def never_run(**_: Any) -> str:
        return ""

    tools = [
        Tool.from_schema(
            never_run,
            name=t["function"]["name"],
            description=t["function"].get("description"),
            json_schema=t["function"]["parameters"],
        )
        for t in openai_tools(functions(case))
    ]
    provider = OpenAIProvider(base_url=server.base_url, api_key="local")
    # pydantic-ai sends its max_tokens setting as `max_completion_tokens`, which
    # llama-cpp-python's server ignores: the reply would have no length limit at all. Its
    # profile switch for servers that take only `max_tokens` keeps the limit every system has.
    profile = {
        **(provider.model_profile(server.model) or {}),
        "openai_chat_supports_max_completion_tokens": False,
    }
    model = OpenAIChatModel(server.model, provider=provider, profile=profile)  # type: ignore[arg-type]
    system, user = _split(case)
    agent = Agent(model, tools=tools, system_prompt=system or ())
    settings = {"temperature": TEMPERATURE, "max_tokens": MAX_TOKENS, "seed": SEED}
    calls: list[dict[str, Any]] = []
    text = ""
    async with agent.iter(user, model_settings=settings) as run:  # type: ignore[arg-type]
        async for node in run:
            if Agent.is_call_tools_node(node):
                for part in node.model_response.parts:
                    if isinstance(part, ToolCallPart):
                        calls.append(
                            {"name": part.tool_name, "arguments": decoded_arguments(part.args)}
                        )
                    elif isinstance(part, TextPart):
                        text += part.content
                break
        usage = run.usage
    return _first_response(calls, text, usage)


async def _openai_agents(
    case: Case[Any], server: Server, tool_choice: str | None = None
) -> SystemRun:
    from agents import (
        Agent,
        FunctionTool,
        ModelSettings,
        OpenAIChatCompletionsModel,
        Runner,
        set_tracing_disabled,
    )
    from agents.items import MessageOutputItem, ToolCallItem
    from openai import AsyncOpenAI

    set_tracing_disabled(True)

    async def never_run(_context: Any, _arguments: str) -> str:
        return ""

    tools = [
        FunctionTool(
            name=t["function"]["name"],
            description=t["function"].get("description", ""),
            params_json_schema=t["function"]["parameters"],
            on_invoke_tool=never_run,
            strict_json_schema=False,
        )
        for t in openai_tools(functions(case))
    ]
    client = AsyncOpenAI(base_url=server.base_url, api_key="local")
    system, user = _split(case)
    agent = Agent(
        name="function_caller",
        instructions=system,
        model=OpenAIChatCompletionsModel(server.model, client),
        tools=tools,
        tool_use_behavior="stop_on_first_tool",
        model_settings=ModelSettings(
            temperature=TEMPERATURE,
            max_tokens=MAX_TOKENS,
            extra_args={"seed": SEED},
            tool_choice=tool_choice,
        ),
    )
    try:
        result = await Runner.run(agent, user, max_turns=2)
    finally:
        await client.close()
    calls: list[dict[str, Any]] = []
    text = ""
    for item in result.new_items:
        if isinstance(item, ToolCallItem):
            raw = item.raw_item
            calls.append(
                {
                    "name": getattr(raw, "name", ""),
                    "arguments": decoded_arguments(getattr(raw, "arguments", "{}")),
                }
            )
        elif isinstance(item, MessageOutputItem):
            text += "".join(getattr(c, "text", "") for c in item.raw_item.content)
    usage = result.context_wrapper.usage
    return _first_response(calls, text, usage)


async def run_peer(name: str, case: Case[Any], server: Server) -> SystemRun:
    """Run ``case`` through the peer called ``name``."""
    if name == "pydantic-ai":
        return await _pydantic_ai(case, server)
    if name == "openai-agents":
        return await _openai_agents(case, server)
    if name == "openai-agents-auto":
        # The SDK sends no tool_choice by default; OpenAI reads that as "auto", but
        # llama-cpp-python's tools format reads it as "none" and never calls.
        return await _openai_agents(case, server, tool_choice="auto")
    raise KeyError(f"no peer {name!r}")
