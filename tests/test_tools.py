"""Tools: schemas from signatures and docstrings, validated and threaded calls."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field

from subagent import ConfigurationError, SubAgent, Tool
from subagent.tools._tool import ToolArgumentsError, render_result

pytestmark = pytest.mark.anyio


def search(query: str, limit: int = 5) -> list[str]:
    """Search the catalogue.

    Longer explanation that is not part of the summary.

    Args:
        query: What to look for.
        limit: How many results to return,
            at most.

    Returns:
        The matching titles.
    """
    return [query] * limit


def test_schema_comes_from_the_signature_and_docstring() -> None:
    definition = Tool(search).definition
    assert definition.name == "search"
    assert definition.description.startswith("Search the catalogue.")
    params = definition.parameters
    assert params["required"] == ["query"]
    assert params["properties"]["limit"] == {
        "default": 5,
        "description": "How many results to return, at most.",
        "title": "Limit",
        "type": "integer",
    }
    assert params["properties"]["query"]["description"] == "What to look for."
    assert params["additionalProperties"] is False


def test_annotated_field_descriptions_are_kept() -> None:
    def f(x: Annotated[int, Field(description="an x", ge=0)]) -> int:
        return x

    assert Tool(f).definition.parameters["properties"]["x"]["description"] == "an x"


def test_name_and_description_can_be_overridden() -> None:
    tool = Tool(search, name="find", description="Find things.")
    assert (tool.definition.name, tool.definition.description) == ("find", "Find things.")


async def test_arguments_are_validated_and_coerced() -> None:
    assert await Tool(search).call({"query": "a", "limit": "2"}) == ["a", "a"]


async def test_invalid_arguments_raise_with_the_field() -> None:
    with pytest.raises(ToolArgumentsError) as caught:
        await Tool(search).call({"limit": "many", "extra": 1})
    assert caught.value.validation is not None
    locations = {error["loc"][0] for error in caught.value.validation.errors()}
    assert locations == {"query", "limit", "extra"}


async def test_non_object_arguments_are_rejected() -> None:
    with pytest.raises(ToolArgumentsError, match="must be a JSON object"):
        await Tool(search).call('{"query": broken')


async def test_async_tools_are_awaited() -> None:
    async def fetch(key: str) -> str:
        """Fetch."""
        return key.upper()

    assert await Tool(fetch).call({"key": "a"}) == "A"


async def test_sync_tools_run_in_a_worker_thread_unless_told_otherwise() -> None:
    def where() -> str:
        return threading.current_thread().name

    loop_thread = threading.current_thread().name
    assert await Tool(where).call({}) != loop_thread
    assert await Tool(where, run_in_thread=False).call({}) == loop_thread


def test_results_render_as_text_or_json() -> None:
    class Point(BaseModel):
        x: int

    assert render_result("plain") == "plain"
    assert render_result(Point(x=1)) == '{"x":1}'
    assert render_result({"a": [1, None]}) == '{"a":[1,null]}'


def _socket_param(query: str, connection: socket.socket) -> None:
    """Needs a socket."""


def _callable_param(callback: Callable[[int], int]) -> None:
    """Needs a callable: validates, but has no JSON schema."""


def _unresolved_param(thing: Undefined) -> None:  # type: ignore[name-defined]  # noqa: F821
    """Names a type that does not exist."""


@pytest.mark.parametrize(
    ("function", "parameter"),
    [(_socket_param, "connection"), (_callable_param, "callback"), (_unresolved_param, "thing")],
)
def test_unsupported_parameter_types_are_configuration_errors(
    function: Callable[..., Any], parameter: str
) -> None:
    with pytest.raises(ConfigurationError, match=r"^tools: ") as caught:
        Tool(function)
    assert caught.value.field == "tools"
    assert f"parameter {parameter!r} of tool {function.__name__!r}" in caught.value.message
    with pytest.raises(ConfigurationError, match=f"parameter {parameter!r}"):
        SubAgent(name="agent", prompt="go", tools=[function])
