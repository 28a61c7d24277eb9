"""Output modes on the wire (subagent.llm._structured, and request_body that uses it).

Each mode in each dialect, the strict schemas OpenAI needs (checked against the original
schema with jsonschema: whatever the strict form accepts, the original accepts), the forced
answer tool and how its call becomes the reply's text again.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from subagent import ConfigurationError
from subagent.llm import (
    LLMRequest,
    LLMResponse,
    Message,
    OutputRequest,
    StopReason,
    ToolCall,
    ToolDefinition,
    strict_schema,
)
from subagent.llm._structured import answer_from_tool, answer_tool, output_fields
from subagent.llm._wire import request_body


class City(BaseModel):
    name: str
    population: int | None = None


class Forecast(BaseModel):
    city: City = Field(description="Where")
    high_c: int = 0
    tags: list[str] = []
    unit: str = Field("C", pattern="^[CF]$")


ANSWER = {
    "type": "object",
    "properties": {"value": {"type": "integer"}},
    "required": ["value"],
}
ADD = ToolDefinition(name="add", parameters={"type": "object", "properties": {}})


def body_for(output: OutputRequest | None, **kwargs: Any) -> dict[str, Any]:
    settings = kwargs.pop("settings", {})
    dialect = kwargs.pop("dialect", "json_schema")
    request = LLMRequest(
        messages=(Message(role="user", content="hi"),), output=output, settings=settings,
        **kwargs,
    )  # fmt: skip
    return request_body(request, model="m", default_settings={}, stream=False, dialect=dialect)


# --- the body of each mode ----------------------------------------------------------------------


def test_a_request_without_an_output_mode_sends_what_it_sent_before() -> None:
    tools = {"tools": [ADD], "tool_choice": "auto"}
    for output in (None, OutputRequest(mode="text")):
        assert body_for(output, **tools) == {
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "add", "description": "",
                                                         "parameters": ADD.parameters}}],
            "tool_choice": "auto",
        }  # fmt: skip


@pytest.mark.parametrize(
    ("dialect", "fields"),
    [
        (
            "json_schema",
            {"response_format": {"type": "json_schema", "json_schema": {
                "name": "answer", "strict": True,
                "schema": {**ANSWER, "additionalProperties": False}}}},
        ),
        ("json_object", {"response_format": {"type": "json_object", "schema": ANSWER}}),
        ("guided_json", {"guided_json": ANSWER}),
        ("structured_outputs", {"structured_outputs": {"json": ANSWER}}),
    ],
)  # fmt: skip
def test_mode_json_schema_is_written_in_each_dialect(dialect: Any, fields: dict[str, Any]) -> None:
    output = OutputRequest(mode="json_schema", json_schema=ANSWER, name="answer")
    body = body_for(output, dialect=dialect)
    assert {key: body[key] for key in fields} == fields
    assert set(body) == {"model", "messages", *fields}


def test_mode_json_schema_replaces_the_structured_output_fields_of_the_settings() -> None:
    settings = {"response_format": {"type": "json_object"}, "guided_json": {"x": 1}, "seed": 3}
    output = OutputRequest(mode="json_schema", json_schema=ANSWER)
    body = body_for(output, settings=settings, dialect="structured_outputs")
    assert body["structured_outputs"] == {"json": ANSWER}
    assert "response_format" not in body and "guided_json" not in body
    assert body["seed"] == 3


def test_mode_tool_offers_the_answer_tool_and_forces_it() -> None:
    output = OutputRequest(mode="tool", json_schema=ANSWER, name="answer", description="The sum.")
    body = body_for(output, tools=[ADD], tool_choice="none", settings={"tool_choice": "auto"})
    assert [tool["function"]["name"] for tool in body["tools"]] == ["add", "answer"]
    assert body["tools"][1]["function"] == {
        "name": "answer",
        "description": "The sum.",
        "parameters": {**ANSWER, "additionalProperties": False},
        "strict": True,
    }
    assert body["tool_choice"] == {"type": "function", "function": {"name": "answer"}}


def test_mode_tool_travels_on_a_turn_that_offers_no_other_tool() -> None:
    output = OutputRequest(mode="tool", json_schema={"type": "integer"}, strict=True)
    body = body_for(output, settings={"parallel_tool_calls": False})
    (tool,) = body["tools"]
    assert tool["function"]["parameters"] == {"type": "integer"}  # not strict-able: as is
    assert "strict" not in tool["function"]
    assert body["tool_choice"]["function"]["name"] == "final_answer"
    assert body["parallel_tool_calls"] is False  # tools travel, so their settings do


def test_an_answer_tool_named_like_an_offered_tool_is_refused() -> None:
    output = OutputRequest(mode="tool", json_schema=ANSWER, name="add")
    with pytest.raises(ConfigurationError, match=r"output\.name: 'add' is also the name of a tool"):
        body_for(output, tools=[ADD])


def test_strict_false_sends_the_schema_as_given() -> None:
    output = OutputRequest(mode="json_schema", json_schema=ANSWER, strict=False)
    format_ = output_fields(output, "json_schema")["response_format"]["json_schema"]
    assert format_ == {"name": "final_answer", "schema": ANSWER, "strict": False}
    tool, _ = answer_tool(OutputRequest(mode="tool", json_schema=ANSWER, strict=False))
    assert tool["function"]["parameters"] == ANSWER and "strict" not in tool["function"]


# --- strict schemas ----------------------------------------------------------------------------


def test_a_pydantic_schema_is_made_strict_by_narrowing_it() -> None:
    original = Forecast.model_json_schema()
    strict = strict_schema(original)
    assert strict is not None
    assert strict["additionalProperties"] is False
    assert strict["required"] == ["city", "high_c", "tags", "unit"]
    city = strict["$defs"]["City"]
    assert city["required"] == ["name", "population"] and city["additionalProperties"] is False
    assert "default" not in strict["properties"]["high_c"]
    # a $ref beside a description goes into anyOf (strict mode takes no siblings of $ref)
    assert strict["properties"]["city"] == {
        "anyOf": [{"$ref": "#/$defs/City"}], "description": "Where"
    }  # fmt: skip
    answer = {"city": {"name": "Oslo", "population": None}, "high_c": 3, "tags": [], "unit": "C"}
    jsonschema.validate(answer, strict)
    jsonschema.validate(answer, original)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"city": {"name": "Oslo"}, "high_c": 3, "tags": [], "unit": "C"},
                            strict)  # fmt: skip


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "integer"},  # the root must be an object
        {"type": "object"},  # open to any keys
        {"type": "object", "properties": {}, "additionalProperties": True},
        {"type": "object", "properties": {"a": {"type": "object",
                                                "additionalProperties": {"type": "integer"}}}},
        {"type": "object", "properties": {"a": {"type": "string", "minLength": 2}}},
        {"type": "object", "properties": {"a": {"oneOf": [{"type": "string"}]}}},
        {"type": "object", "properties": {"a": {"type": "array"}}},  # untyped items
        {"type": "object", "properties": {"a": {"type": "string", "format": "uri"}}},
        {"type": "object", "properties": {"a": {"$ref": "#/$defs/A", "minimum": 1}}},
        {"type": "object", "properties": {"a": True}},
    ],
)  # fmt: skip
def test_a_schema_strict_mode_cannot_take_is_not_made_strict(schema: dict[str, Any]) -> None:
    assert strict_schema(schema) is None
    output = OutputRequest(mode="json_schema", json_schema=schema)
    sent = output_fields(output, "json_schema")["response_format"]["json_schema"]
    assert sent["strict"] is False and sent["schema"] == schema


def test_a_schema_nested_past_the_bound_is_not_walked_on() -> None:
    schema: dict[str, Any] = {"type": "object", "properties": {}}
    node = schema
    for _ in range(200):
        inner: dict[str, Any] = {"type": "object", "properties": {}}
        node["properties"]["x"] = inner
        node = inner
    assert strict_schema(schema) is None


def test_making_a_schema_strict_leaves_it_unchanged() -> None:
    original = Forecast.model_json_schema()
    copy = Forecast.model_json_schema()
    strict_schema(original)
    assert original == copy


_LEAF = st.sampled_from([
    {"type": "string"}, {"type": "integer", "minimum": 0}, {"type": "boolean"},
    {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
    {"enum": ["a", "b"]}, {"type": "array", "items": {"type": "number"}},
])  # fmt: skip
_SCHEMAS = st.recursive(
    _LEAF,
    lambda inner: st.dictionaries(st.sampled_from("abcd"), inner, max_size=3).map(
        lambda properties: {"type": "object", "properties": properties,
                            "required": sorted(properties)[:1]}
    ),
    max_leaves=8,
).filter(lambda schema: schema.get("type") == "object")  # fmt: skip
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=2),
    lambda inner: (
        st.lists(inner, max_size=2) | st.dictionaries(st.sampled_from("abcde"), inner, max_size=3)
    ),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None)
@given(schema=_SCHEMAS, value=_VALUES)
def test_whatever_a_strict_schema_accepts_the_original_accepts(
    schema: dict[str, Any], value: Any
) -> None:
    strict = strict_schema(schema)
    assert strict is not None
    validator = jsonschema.Draft202012Validator
    if validator(strict).is_valid(value):
        assert validator(schema).is_valid(value)


# --- the forced answer tool's reply ---------------------------------------------------------------


def test_the_answer_tools_call_becomes_the_replys_text() -> None:
    output = OutputRequest(mode="tool", json_schema=ANSWER, name="answer")
    reply = LLMResponse(
        text="thinking aloud", tool_calls=[ToolCall(name="answer", arguments={"value": 3})],
        raw_stop_reason="tool_calls",
    )  # fmt: skip
    read = answer_from_tool(reply, output)
    assert read.text == '{"value": 3}' and read.tool_calls == []
    assert read.stop_reason is StopReason.STOP and read.raw_stop_reason == "tool_calls"
    raw = LLMResponse(tool_calls=[ToolCall(name="answer", arguments="{broken")])
    assert answer_from_tool(raw, output).text == "{broken"  # judged, and fed back, as text


def test_a_reply_that_did_not_follow_the_forced_choice_is_left_as_it_came() -> None:
    output = OutputRequest(mode="tool", json_schema=ANSWER, name="answer")
    text_only = LLMResponse(text='{"value": 3}')
    other = LLMResponse(tool_calls=[ToolCall(name="add", arguments={})])
    both = LLMResponse(tool_calls=[ToolCall(name="answer"), ToolCall(name="add")])
    for reply in (text_only, other, both):
        assert answer_from_tool(reply, output) is reply
