"""Tool sources (subagent/tools/_source.py): mapped_source, the seam that wraps a source's
tools for every run, and ToolSourceLostError across a process boundary."""

from __future__ import annotations

import dataclasses
import functools
import pickle
from collections.abc import Callable
from typing import Any

import pytest
from support import ListedSource

from subagent import (
    ConfigurationError,
    FailReason,
    LLMResponse,
    ScriptedLLM,
    SubAgent,
    Tool,
    ToolCall,
    ToolSourceLostError,
)
from subagent.tools import MappedSource, SourceNotReadyError, mapped_source

pytestmark = pytest.mark.anyio


class Listed(ListedSource):
    """A key-value server's tools, as the test lists them."""

    source_name = "store server 'kv'"


def get(key: str) -> str:
    """Read a key."""
    return f"value of {key}"


def put(key: str, value: str) -> str:
    """Write a key."""
    return "stored"


def gone(key: str) -> str:
    """A tool whose service went away."""
    raise ToolSourceLostError("store server 'kv' went away: reset", source="store server 'kv'")


class Counting:
    """A wrap that logs each call of the tools it wrapped, and counts the tools it wrapped."""

    def __init__(self) -> None:
        self.wrapped: list[str] = []
        self.calls: list[str] = []

    def __call__(self, tool: Tool) -> Tool:
        self.wrapped.append(tool.name)

        @functools.wraps(tool.function)
        def logged(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(tool.name)
            return tool.function(*args, **kwargs)

        return dataclasses.replace(tool, function=logged)


def call(name: str, **arguments: Any) -> LLMResponse:
    return LLMResponse(tool_calls=[ToolCall(name=name, arguments=arguments)])


def test_a_mapped_source_keeps_the_sources_name_and_revision_and_wraps_each_tool() -> None:
    source = Listed()
    source.lists(Tool(get), Tool(put))
    wrap = Counting()
    mapped = mapped_source(source, wrap)
    assert isinstance(mapped, MappedSource)
    assert mapped.source_name == "store server 'kv'"
    revision, tools = mapped.current_tools()
    assert revision == source.revision
    assert [tool.name for tool in tools] == ["get", "put"]
    assert [tool.definition for tool in tools] == [Tool(get).definition, Tool(put).definition]
    assert tools[0](key="a") == "value of a" and wrap.calls == ["get"]


def test_a_mapped_source_wraps_each_listing_once_and_again_when_its_revision_moves() -> None:
    source = Listed()
    source.lists(Tool(get))
    wrap = Counting()
    mapped = mapped_source(source, wrap)
    first = mapped.current_tools()
    assert mapped.current_tools() is first  # read by every run: built once per listing
    assert wrap.wrapped == ["get"]
    source.lists(Tool(get), Tool(put))
    revision, tools = mapped.current_tools()
    assert revision == source.revision != first[0]
    assert [tool.name for tool in tools] == ["get", "put"]
    assert wrap.wrapped == ["get", "get", "put"]


def test_a_source_that_is_not_ready_is_not_ready_mapped() -> None:
    mapped = mapped_source(Listed(), Counting())
    with pytest.raises(SourceNotReadyError, match="store server 'kv' is not connected"):
        mapped.current_tools()


async def test_an_agent_runs_a_mapped_sources_tools_and_sees_its_list_move() -> None:
    source = Listed()
    source.lists(Tool(get))
    wrap = Counting()
    agent = SubAgent(name="kv", prompt="Read a.", tools=[mapped_source(source, wrap)],
                     max_turns=3)  # fmt: skip
    llm = ScriptedLLM([call("get", key="a"), "done", call("put", key="b", value="1"), "done"])
    step = await agent.run(llm=llm)
    assert step.ok and wrap.calls == ["get"]
    assert step.turns[0].tool_results[0].ok
    source.lists(Tool(get), Tool(put))  # the next run gets the new list, wrapped
    step = await agent.run(llm=llm)
    assert step.ok and wrap.calls == ["get", "put"]
    assert [tool.name for tool in llm.requests[2].tools] == ["get", "put"]


async def test_a_lost_source_behind_a_mapped_source_still_ends_the_run_failed() -> None:
    source = Listed()
    source.lists(Tool(gone))
    agent = SubAgent(name="kv", prompt="Read a.", tools=[mapped_source(source, Counting())],
                     max_turns=3)  # fmt: skip
    step = await agent.run(llm=ScriptedLLM([call("gone", key="a"), "never asked"]))
    assert step.failure is not None
    assert step.failure.reason == FailReason.TOOL_SERVER_LOST and step.retryable
    assert step.turns[0].tool_results[0].error_type == "tool_server_lost"


def test_a_mapped_source_clashing_with_a_tool_of_the_agent_is_refused_naming_both() -> None:
    source = Listed()
    source.lists(Tool(get))
    with pytest.raises(ConfigurationError, match="two tools are named 'get': a Python tool and "
                                                 "one of store server 'kv'"):  # fmt: skip
        SubAgent(name="kv", prompt="Read.", tools=[get, mapped_source(source, Counting())])


def test_a_wrap_that_returns_no_tool_is_refused_naming_the_tool_and_the_source() -> None:
    source = Listed()
    source.lists(Tool(get))
    mapped = mapped_source(source, lambda tool: tool.function)  # type: ignore[arg-type, return-value]
    with pytest.raises(ConfigurationError, match=r"returned <function get .*> for the tool "
                                                 r"'get' of store server 'kv': it must return "
                                                 r"a Tool"):  # fmt: skip
        mapped.current_tools()


@pytest.mark.parametrize(
    ("source", "wrap", "field"),
    [
        pytest.param(Tool(get), lambda tool: tool, "tools", id="a-tool-not-a-source"),
        pytest.param(get, lambda tool: tool, "tools", id="a-function-not-a-source"),
        pytest.param(Listed(), "not callable", "wrap", id="a-wrap-not-callable"),
    ],
)
def test_what_is_not_a_source_or_a_wrap_is_refused_naming_it(
    source: Any, wrap: Callable[[Tool], Tool], field: str
) -> None:
    with pytest.raises(ConfigurationError) as refused:
        mapped_source(source, wrap)
    assert refused.value.field == field


def test_a_lost_source_error_pickles_with_its_type_and_source() -> None:
    # A durable run records what a tool raised in its step: the error must come back as
    # itself, or a replayed run would not end failed(tool_server_lost).
    restored = pickle.loads(pickle.dumps(ToolSourceLostError("kv went away", source="kv")))
    assert type(restored) is ToolSourceLostError
    assert (str(restored), restored.source) == ("kv went away", "kv")
