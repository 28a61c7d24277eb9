"""A schema's shape with placeholders (subagent/parsers/_example.py), for the prompt."""

from __future__ import annotations

import json
from typing import Literal

import pytest
from pydantic import BaseModel, Field, RootModel, TypeAdapter

from subagent.parsers._example import MAX_EXAMPLE_CHARS, schema_example


class Address(BaseModel):
    city: str
    zip_code: str | None = None


class Person(BaseModel):
    name: str
    age: int
    height_m: float
    member: bool
    mood: Literal["calm", "busy"]
    address: Address
    tags: list[str] = Field(default_factory=list)


class Node(BaseModel):
    label: str
    children: list[Node] = []


def shape(kind: object) -> str | None:
    return schema_example(TypeAdapter(kind).json_schema())


def test_an_object_is_shown_with_a_placeholder_for_each_value_named_by_its_field() -> None:
    assert shape(Person) == (
        '{"name": <name>, "age": <integer>, "height_m": <number>, "member": <true or false>, '
        '"mood": <"calm" or "busy">, "address": {"city": <city>, "zip_code": <zip_code>}, '
        '"tags": [<tags>]}'
    )


def test_the_shape_copied_as_it_is_is_not_json_so_it_is_never_taken_for_an_answer() -> None:
    text = shape(Person)
    assert text is not None
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)


def test_a_list_of_calls_is_shown_as_a_list_of_one_call() -> None:
    class Call(BaseModel):
        name: str
        arguments: dict[str, object]

    assert shape(RootModel[list[Call]]) == '[{"name": <name>, "arguments": {...}}]'


def test_a_recursive_model_is_written_once_and_then_elided() -> None:
    assert shape(Node) == '{"label": <label>, "children": [...]}'


@pytest.mark.parametrize("kind", [int, str, float, bool, Literal["a", "b"]])
def test_a_value_that_is_not_an_object_or_a_list_has_no_shape_beside_its_schema(
    kind: object,
) -> None:
    assert shape(kind) is None


def test_a_shape_longer_than_the_limit_is_left_out() -> None:
    fields = {f"field_{n}": {"type": "string"} for n in range(400)}
    assert schema_example({"type": "object", "properties": fields}) is None
    few = {f"f{n}": {"type": "string"} for n in range(3)}
    shown = schema_example({"type": "object", "properties": few})
    assert shown is not None and len(shown) <= MAX_EXAMPLE_CHARS


def test_a_long_enum_and_a_const_are_shown_without_listing_every_value() -> None:
    schema = {
        "type": "object",
        "properties": {
            "unit": {"enum": ["a", "b", "c", "d", "e"]},
            "kind": {"const": "order"},
        },
    }
    assert schema_example(schema) == '{"unit": <one of the schema\'s values>, "kind": "order"}'
