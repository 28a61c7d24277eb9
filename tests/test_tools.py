"""Tools: schemas from signatures and docstrings, validated and threaded calls."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable
from typing import Annotated, Any

import anyio
import pytest
from pydantic import BaseModel, Field

from subagent import ConfigurationError, FromExtras, SubAgent, Tool, tool
from subagent.tools import ToolArgumentsError, render_result

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


# --- the decorator, schemas, pruning ---


def test_the_decorator_makes_a_tool_that_stays_callable() -> None:
    @tool
    def double(x: int) -> int:
        """Double x."""
        return 2 * x

    @tool(name="triple", timeout=2.5, run_in_thread=False)
    def times_three(x: int) -> int:
        """Triple x."""
        return 3 * x

    assert isinstance(double, Tool) and double.definition.description == "Double x."
    assert double(4) == 8
    assert (times_three.name, times_three.timeout, times_three.run_in_thread) == (
        "triple",
        2.5,
        False,
    )
    assert times_three(2) == 6


class Address(BaseModel):
    city: str


class Person(BaseModel):
    name: str
    home: Address


class Node(BaseModel):
    value: int
    children: list[Node] = []


def register(person: Person, backup: Address | None = None) -> str:
    return person.name


def walk(tree: Node) -> int:
    return tree.value


def test_nested_models_are_inlined_rather_than_referenced() -> None:
    schema = Tool(register).definition.parameters
    assert "$defs" not in json.dumps(schema) and "$ref" not in json.dumps(schema)
    assert schema["properties"]["person"]["properties"]["home"]["properties"]["city"] == {
        "title": "City",
        "type": "string",
    }
    assert schema["additionalProperties"] is False


def test_a_recursive_model_keeps_its_definitions() -> None:
    schema = Tool(walk).definition.parameters
    assert "$defs" in schema  # a recursive model cannot be inlined
    assert schema["properties"]["tree"]["$ref"].startswith("#/$defs/")


def test_pruning_drops_unknown_arguments_and_names_them() -> None:
    kept, pruned = Tool(search).prune({"query": "a", "colour": "red", "size": 2})
    assert kept == {"query": "a"} and pruned == ["colour", "size"]
    assert Tool(search).prune({"query": "a"}) == ({"query": "a"}, [])


def test_extras_parameters_are_hidden_from_the_model_and_need_a_default() -> None:
    def query(sql: str, conn: Annotated[object, FromExtras] = None) -> str:
        return sql

    made = Tool(query)
    assert made.extras_parameters == {"conn"}
    assert list(made.definition.parameters["properties"]) == ["sql"]

    def strict(sql: str, conn: Annotated[object, FromExtras]) -> str:
        return sql

    with pytest.raises(ConfigurationError, match=r"'conn' of tool 'strict'.*needs a default"):
        Tool(strict)


async def test_extras_reach_only_the_parameters_marked_for_them() -> None:
    seen: list[object] = []

    def query(sql: str, conn: Annotated[object, FromExtras] = None) -> str:
        seen.append(conn)
        return sql

    marker = object()
    await Tool(query).call({"sql": "x"}, {"conn": marker, "other": 1})
    await Tool(query).call({"sql": "x"})
    assert seen == [marker, None]


@pytest.mark.parametrize("value", ["1", 0, None])
def test_tool_flags_must_be_bools(value: object) -> None:
    with pytest.raises(ConfigurationError, match="run_in_thread"):
        Tool(search, run_in_thread=value)  # type: ignore[arg-type]


def test_a_tool_timeout_must_be_positive_seconds() -> None:
    with pytest.raises(ConfigurationError, match="timeout"):
        Tool(search, timeout=0)


async def test_a_tool_over_its_timeout_raises_timeout_error() -> None:
    async def stuck() -> None:
        await anyio.sleep_forever()

    with pytest.raises(TimeoutError):
        await Tool(stuck, timeout=0.01).call({})


async def test_a_blocked_sync_tool_is_abandoned_at_its_timeout() -> None:
    release = threading.Event()

    def blocked() -> str:
        release.wait(10)
        return "late"

    try:
        with pytest.raises(TimeoutError):
            await Tool(blocked, timeout=0.01).call({})
    finally:
        release.set()  # the abandoned thread returns; its result is dropped


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
