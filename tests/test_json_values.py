"""subagent._json_values: a value each schema accepts, made up from the schema (TestLLM's)."""

from __future__ import annotations

import json
import re
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from enum import Enum
from ipaddress import IPv4Address, IPv6Address
from typing import Annotated, Any, Literal
from uuid import UUID

import jsonschema
import pytest
from pydantic import AnyUrl, BaseModel, Field, TypeAdapter

from subagent._json_values import MAX_DEPTH, SchemaValueError, value_for


class Color(Enum):
    RED = "red"
    BLUE = "blue"


class Address(BaseModel):
    street: str = Field(min_length=5, max_length=40)
    number: int = Field(ge=1, lt=10_000)
    zip_code: str = Field(pattern=r"^\d{4,5}$")


class Person(BaseModel):
    name: str
    born: date
    seen: datetime
    wake: time
    nap: timedelta
    id: UUID
    site: AnyUrl
    ip4: IPv4Address
    ip6: IPv6Address
    color: Color
    mood: Literal["happy", "sad"]
    address: Address
    homes: list[Address] = Field(min_length=2, max_length=3)
    tags: set[str]
    point: tuple[int, float, str]
    ratings: dict[str, Annotated[float, Field(gt=0, le=5, multiple_of=0.5)]]
    price: Decimal
    nickname: str | None
    pet: Annotated[Cat | Dog, Field(discriminator="kind")]
    friend: Person | None = None


class Cat(BaseModel):
    kind: Literal["cat"]
    lives: int = Field(multiple_of=3, gt=4)


class Dog(BaseModel):
    kind: Literal["dog"]
    good: bool


class Tree(BaseModel):
    value: int
    children: list[Tree]
    parent: Tree | None  # required: a recursive value that must end somewhere


TYPES: list[Any] = [
    int, float, str, bool, None, list[int], dict[str, int], Person, Tree,
    Annotated[int, Field(gt=10, le=11)], Annotated[float, Field(gt=0, lt=1)],
    Annotated[str, Field(min_length=3, max_length=3)], Annotated[list[int], Field(max_length=0)],
    Literal[3], Literal["a", "b"], int | str, tuple[()],
]  # fmt: skip


@pytest.mark.parametrize("kind", TYPES, ids=repr)
@pytest.mark.parametrize("seed", [0, 1, 7])
def test_pydantic_validates_the_value_made_up_from_its_own_schema(kind: Any, seed: int) -> None:
    adapter = TypeAdapter(kind)
    schema = adapter.json_schema()
    value = value_for(schema, seed)
    adapter.validate_json(json.dumps(value))  # the way an answer is read: from JSON
    jsonschema.validate(value, schema)


TOOL_SCHEMAS: list[dict[str, Any]] = [
    {"type": "object", "properties": {"q": {"type": "string"}, "n": {"type": "integer"}},
     "required": ["q"], "additionalProperties": False},
    {"type": "object", "properties": {"ids": {"type": "array", "items": {"type": "integer"},
                                              "minItems": 3, "uniqueItems": True}},
     "required": ["ids"]},
    {"type": "object", "minProperties": 2, "properties": {"a": {}, "b": {"type": "null"}}},
    {"type": "object", "properties": {"x": {"type": ["null", "number"], "minimum": 2.5,
                                            "exclusiveMaximum": 3}},
     "required": ["x"]},
    {"allOf": [{"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
               {"properties": {"b": {"const": 1}}, "required": ["b"]}]},
    {"type": "object", "properties": {"e": {"enum": [None, 1, "two"]},
                                      "p": {"type": "array", "prefixItems": [
                                          {"type": "string", "format": "email"},
                                          {"type": "boolean"}], "items": False}},
     "required": ["e", "p"]},
    {"$defs": {"Leaf": {"type": "string", "maxLength": 0}},
     "type": "object", "properties": {"leaf": {"$ref": "#/$defs/Leaf"}}, "required": ["leaf"]},
    True,
    {},
]  # fmt: skip


@pytest.mark.parametrize(
    "pattern",
    [r"^\d{4,5}$", r"^[A-Z]{3}-\d{4}$", r"^(?:ab|cd)+[^a-c]\w\s.$", r"^\S+@\S+\.\w{2,}$",
     r"[^\d\s]{2}", r"^(?P<y>\d{4})-(0[1-9]|1[0-2])$", "^café$"],
)  # fmt: skip
def test_a_string_pattern_is_spelled_from_its_plain_parts(pattern: str) -> None:
    for seed in (0, 1):
        value = value_for({"type": "string", "pattern": pattern}, seed)
        assert re.search(pattern, value), value


@pytest.mark.parametrize("schema", TOOL_SCHEMAS, ids=lambda s: json.dumps(s)[:40])
@pytest.mark.parametrize("seed", [0, 3])
def test_a_hand_written_tool_schema_accepts_its_made_up_arguments(schema: Any, seed: int) -> None:
    jsonschema.validate(value_for(schema, seed), schema)


def test_seeds_make_different_values_where_the_schema_allows() -> None:
    schema = TypeAdapter(Person).json_schema()
    assert value_for(schema, 0) != value_for(schema, 1)
    assert value_for(schema, 0) == value_for(schema, 0)  # deterministic


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "object", "properties": {"code": {"type": "string", "pattern": "^(?=9)[a-z]$"}},
          "required": ["code"]}, "$.code: cannot write a string matching '^(?=9)[a-z]$'"),
        ({"type": "string", "minLength": 5, "maxLength": 2}, "$: cannot write a string of that"),
        ({"$ref": "#/$defs/Missing"}, "$: cannot resolve $ref '#/$defs/Missing'"),
        ({"type": "array", "items": {"type": "decimal"}, "minItems": 1},
         "$[0]: unknown type 'decimal'"),
        (False, "$: the schema False accepts no value"),
        ({"$defs": {"L": {"type": "object", "properties": {"next": {"$ref": "#/$defs/L"}},
                          "required": ["next"]}}, "$ref": "#/$defs/L"},
         f"would nest deeper than {MAX_DEPTH} levels"),
    ],
)  # fmt: skip
def test_a_schema_it_cannot_satisfy_is_an_error_naming_the_place(schema: Any, message: str) -> None:
    with pytest.raises(SchemaValueError) as caught:
        value_for(schema)
    assert message in str(caught.value)
