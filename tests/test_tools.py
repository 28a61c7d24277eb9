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
from subagent.tools import ToolArgumentsError, ToolTimeoutError
from subagent.tools._tool import render_result

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


def test_a_tool_description_must_be_text() -> None:
    with pytest.raises(ConfigurationError, match=r"^description: must be a str, got 3"):
        Tool(search, description=3)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"^description: .*tool 'find'"):
        Tool.from_schema("find", b"Find.", {"type": "object"}, _order)  # type: ignore[arg-type]


def test_a_tool_timeout_must_be_positive_seconds() -> None:
    with pytest.raises(ConfigurationError, match="timeout"):
        Tool(search, timeout=0)


async def test_a_tool_over_its_timeout_raises_timeout_error() -> None:
    async def stuck() -> None:
        await anyio.sleep_forever()

    with pytest.raises(TimeoutError):
        await Tool(stuck, timeout=0.01).call({})


async def test_a_timeout_error_of_the_tool_itself_is_not_taken_for_its_time_limit() -> None:
    def own() -> None:
        raise TimeoutError("socket")

    with pytest.raises(TimeoutError) as caught:
        await Tool(own, timeout=30).call({})
    assert not isinstance(caught.value, ToolTimeoutError)

    async def stuck() -> None:
        await anyio.sleep_forever()

    with pytest.raises(ToolTimeoutError, match=r"did not finish within 0\.01 s"):
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


# --- tools from a JSON schema ---

ORDER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "sku": {"type": "string", "description": "the product"},
        "size": {"enum": ["S", "M", "L"]},
        "lines": {
            "type": "array",
            "items": {"type": "object", "properties": {"qty": {"type": "integer", "minimum": 1}}},
        },
    },
    "required": ["sku"],
    "additionalProperties": False,
}


def _order(**arguments: Any) -> dict[str, Any]:
    return arguments


def test_a_schema_tool_sends_its_schema_exactly_as_given() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    made = Tool.from_schema("find", "Find things.", schema, _order)
    definition = made.definition
    assert (definition.name, definition.description) == ("find", "Find things.")
    assert definition.parameters == schema  # no title, no additionalProperties added
    schema["properties"]["q"]["type"] = "integer"  # a later change to the caller's dict...
    assert made.definition.parameters["properties"]["q"] == {"type": "string"}  # ...is not seen


async def test_a_schema_tool_passes_the_parsed_json_values_uncoerced() -> None:
    made = Tool.from_schema("order", "Order.", ORDER_SCHEMA, _order)
    arguments = {"sku": "a1", "size": "M", "lines": [{"qty": 2}]}
    assert await made.call(arguments) == arguments
    with pytest.raises(ToolArgumentsError):  # "2" is not an integer: no coercion
        await made.call({"sku": "a1", "lines": [{"qty": "2"}]})


async def test_schema_validation_feedback_names_the_path_value_and_expectation() -> None:
    made = Tool.from_schema("order", "Order.", ORDER_SCHEMA, _order)
    with pytest.raises(ToolArgumentsError) as caught:
        await made.call({"size": "XL", "lines": [{"qty": 0}, {"qty": "two"}]})
    items = {item["location"]: item for item in caught.value.items or []}
    assert set(items) == {"sku", "size", "lines.0.qty", "lines.1.qty"}
    assert items["sku"]["message"] == "Field required"
    assert items["size"] == {
        "location": "size",
        "message": 'should be one of: "S", "M", "L"',
        "received": '"XL"',
    }
    assert items["lines.1.qty"]["message"] == "should be of type integer"
    assert items["lines.1.qty"]["received"] == '"two"'
    assert "minimum" in items["lines.0.qty"]["message"]


WEATHER_SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "dontcare"},
        "date": {"type": "string", "default": None},
        "days": {"type": "integer", "default": 1},
        "where": {
            "type": "object",
            "properties": {"country": {"type": "string", "default": None}},
        },
    },
    "required": ["city"],
}


async def test_a_schema_tool_accepts_each_documented_default_even_outside_its_type() -> None:
    made = Tool.from_schema("weather", "Weather.", WEATHER_SCHEMA, _order)
    defaults = {"city": "Porto", "unit": "dontcare", "date": None, "days": 1,
                "where": {"country": None}}  # fmt: skip
    assert await made.call(defaults) == defaults
    assert made.definition.parameters == WEATHER_SCHEMA  # the model is shown it unchanged


async def test_a_value_neither_allowed_nor_the_default_names_both_in_its_feedback() -> None:
    made = Tool.from_schema("weather", "Weather.", WEATHER_SCHEMA, _order)
    with pytest.raises(ToolArgumentsError) as caught:
        await made.call({"city": "Porto", "unit": "kelvin", "date": 3, "days": "two"})
    items = {item["location"]: item for item in caught.value.items or []}
    assert items["unit"]["message"] == (
        'should be one of: "celsius", "fahrenheit", or its default "dontcare"'
    )
    assert items["date"]["message"] == "should be of type string, or its default null"
    assert items["days"]["message"] == "should be of type integer"  # its default is an integer


async def test_a_schema_tool_can_be_async_and_time_out() -> None:
    async def slow(**arguments: Any) -> str:
        await anyio.sleep_forever()
        return "never"

    made = Tool.from_schema("slow", "Slow.", {"type": "object"}, slow, timeout=0.01)
    with pytest.raises(TimeoutError):
        await made.call({})


def test_an_open_schema_passes_unknown_arguments_through() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    made = Tool.from_schema("find", "Find.", schema, _order)
    assert made.prune({"q": "a", "other": 1}) == ({"q": "a", "other": 1}, [])


def test_a_closed_schema_prunes_what_it_does_not_list() -> None:
    schema = {
        "type": "object",
        "properties": {"q": {"type": "string"}},
        "patternProperties": {"^x-": {}},
        "additionalProperties": False,
    }
    made = Tool.from_schema("find", "Find.", schema, _order)
    kept, pruned = made.prune({"q": "a", "x-trace": 1, "other": 2})
    assert (kept, pruned) == ({"q": "a", "x-trace": 1}, ["other"])


async def test_a_closed_schema_refuses_unknown_arguments_when_pruning_is_off() -> None:
    made = Tool.from_schema("order", "Order.", ORDER_SCHEMA, _order, prune_unknown_args=False)
    with pytest.raises(ToolArgumentsError) as caught:
        await made.call({"sku": "a", "colour": "red"})
    assert caught.value.items == [
        {
            "location": "colour",
            "message": "unexpected: the schema does not allow it",
            "received": '"red"',
        }
    ]


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "objekt"}, r"tool 'bad' has an invalid JSON schema at type"),
        ({"type": "object", "properties": {"a": {"minimum": "1"}}}, r"tool 'bad'.*properties/a"),
        ({"type": "object", "default": float("nan")}, r"JSON schema of tool 'bad' is not JSON"),
        ({"type": "object", "default": object()}, r"JSON schema of tool 'bad' is not JSON"),
        ([{"type": "object"}], r"parameters of tool 'bad' must be a JSON schema object"),
        ({"$schema": "https://example.com/mine"}, r"tool 'bad' names an unknown JSON schema"),
        ({"$schema": 7}, r"tool 'bad' names an unknown JSON schema dialect \(\$schema 7\)"),
        ({"type": "array"}, r"tool 'bad' must describe an object .*got type 'array'"),
        ({"properties": {"a": {}}}, r"tool 'bad' must describe an object .*got type None"),
    ],
)
def test_a_bad_schema_is_a_configuration_error_naming_the_tool(schema: Any, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as caught:
        Tool.from_schema("bad", "Bad.", schema, _order)
    assert caught.value.field == "tools"


def test_a_schema_tool_validates_in_the_dialect_its_schema_names() -> None:
    draft4 = {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 1, "exclusiveMinimum": True}},
    }
    made = Tool.from_schema("d4", "Draft 4.", draft4, _order)
    assert made.validate_arguments({"n": 2}) == {"n": 2}
    with pytest.raises(ToolArgumentsError, match="n: "):  # draft 4's boolean exclusiveMinimum
        made.validate_arguments({"n": 1})


def test_a_schema_tool_does_not_read_the_functions_signature() -> None:
    def anything(*args: Any, **kwargs: Any) -> None:  # a signature tools may not have
        """Docstring summary."""

    made = Tool(anything, name="anything", parameters={"type": "object"})
    assert made.definition.description == "Docstring summary."
    assert made.definition.parameters == {"type": "object"}


async def test_arguments_nested_past_the_limit_are_refused_without_recursion() -> None:
    deep: Any = {}
    for _ in range(10_000):
        deep = {"a": deep}
    for made in (Tool(search), Tool.from_schema("s", "S.", {"type": "object"}, _order)):
        with pytest.raises(ToolArgumentsError, match="nested at most 100 levels deep"):
            await made.call({"query": deep})
    shallow: Any = {}
    for _ in range(98):
        shallow = {"a": shallow}
    assert await Tool.from_schema("s", "S.", {"type": "object"}, _order).call(shallow) == shallow


# --- patterns: matched in linear time, or the tool is refused ---

BACKTRACKING = {"type": "object", "properties": {"s": {"type": "string", "pattern": "^(a+)+$"}}}


def isolated(code: str) -> list[str]:
    """What ``code`` prints, run in a subprocess: a backtracking match holds the GIL in C
    code for hours, so a regression must not run in the suite's own process."""
    import subprocess
    import sys
    import textwrap

    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=60, check=True)  # fmt: skip
    return done.stdout.splitlines()


def test_a_backtracking_pattern_is_checked_in_linear_time() -> None:
    # `^(a+)+$` against 40 characters and a mismatch takes Python's `re` hours.
    printed = isolated(f"""
        from subagent import Tool
        from subagent.tools import ToolArgumentsError
        tool = Tool.from_schema("t", "d", {BACKTRACKING!r}, lambda s: s)
        try:
            tool.validate_arguments({{"s": "a" * 40 + "!"}})
        except ToolArgumentsError as exc:
            print(exc.items[0]["location"], "refused")
        print(tool.validate_arguments({{"s": "a" * 40}}) == {{"s": "a" * 40}})
    """)
    assert printed == ["s refused", "True"]


def test_pattern_properties_and_pruning_match_in_linear_time() -> None:
    printed = isolated("""
        from subagent import Tool
        from subagent.tools import ToolArgumentsError
        schema = {"type": "object", "additionalProperties": False,
                  "patternProperties": {"^(x+)+$": {"type": "integer"}}}
        tool = Tool.from_schema("t", "d", schema, lambda **kw: kw)
        hostile = "x" * 40 + "!"
        print(tool.prune({"xxx": 1, hostile: 2}) == ({"xxx": 1}, [hostile]))
        try:
            tool.validate_arguments({"xx": "one", hostile: 2})
        except ToolArgumentsError as exc:
            print(sorted(item["location"] for item in exc.items) == ["xx", hostile])
    """)
    assert printed == ["True", "True"]


def test_patterns_follow_the_json_schema_dialect_not_pythons() -> None:
    # ECMA 262: \d is ASCII only, and $ is the end of the text (Python's also matches before
    # a final newline).
    schema = {"type": "object", "properties": {"n": {"type": "string", "pattern": r"^\d+$"}}}
    built = Tool.from_schema("t", "d", schema, lambda n: n)
    assert built.validate_arguments({"n": "42"}) == {"n": "42"}
    for bad in ("٤٢", "42\n"):
        with pytest.raises(ToolArgumentsError):
            built.validate_arguments({"n": bad})


@pytest.mark.parametrize(
    "pattern", ["(?=.*[A-Z]).{8,}", r"^(a)\1$"], ids=["look-ahead", "backreference"]
)
def test_a_pattern_without_a_linear_time_match_is_refused_when_the_tool_is_built(
    pattern: str,
) -> None:
    schema = {"type": "object", "properties": {"p": {"type": "string", "pattern": pattern}}}
    with pytest.raises(ConfigurationError, match=r"tool 't' has a pattern at properties/p/pattern"):
        Tool.from_schema("t", "d", schema, lambda p: p)


def test_without_re2_a_tool_with_a_pattern_is_refused_never_backtracked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from subagent.tools import _patterns

    monkeypatch.setattr(_patterns, "_re2", None)
    monkeypatch.setattr(_patterns, "_compiled", {})
    monkeypatch.setattr("subagent.tools._tool._CHECKED", {})
    with pytest.raises(ConfigurationError, match=r'pip install "subagent-runtime\[re2\]"'):
        Tool.from_schema("t", "d", BACKTRACKING, lambda s: s)
    plain = {"type": "object", "properties": {"s": {"type": "string"}}}
    assert Tool.from_schema("t", "d", plain, lambda s: s).validate_arguments({"s": "a"})


def test_a_schema_is_checked_once_however_many_tools_use_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import jsonschema.validators

    checks: list[object] = []
    original = jsonschema.validators.Draft202012Validator.check_schema

    def counted(schema: Any, *args: Any, **kwargs: Any) -> None:
        checks.append(schema)
        original(schema, *args, **kwargs)

    monkeypatch.setattr(jsonschema.validators.Draft202012Validator, "check_schema", counted)
    schema = {"type": "object", "properties": {"unique_to_this_test": {"type": "integer"}}}
    for name in ("one", "two", "three"):
        Tool.from_schema(name, "d", dict(schema), lambda unique_to_this_test: 0)
    assert len(checks) == 1
