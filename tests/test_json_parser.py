import json

import pytest
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, field_validator

from subagent import ConfigurationError, ScriptedLLM, SubAgent
from subagent._templates import default_templates
from subagent.parsers._json import JSONParser, format_validation_errors, json_parser


class Item(BaseModel):
    name: str
    qty: int


class Order(BaseModel):
    id: int
    items: list[Item]
    note: str = ""


ORDER = Order(id=7, items=[Item(name="tea", qty=2)])
ORDER_JSON = ORDER.model_dump_json()


@pytest.mark.parametrize(
    "text",
    [
        ORDER_JSON,
        f"Here is the order:\n```json\n{ORDER_JSON}\n```",
        f"Sure! {ORDER_JSON} Let me know if you need more.",
        f'Draft: {{"id": 1, "items": []}}\nFinal:\n```json\n{ORDER_JSON}\n```',
        '{"id": 7, "items": [{"name": "tea", "qty": 2,},], // the order\n}',
        f"{ORDER_JSON}\nSee [1] for details.",
    ],
)
def test_json_parser_returns_the_validated_model(text: str) -> None:
    result = json_parser(Order)(text)
    assert result.ok, result.feedback
    assert result.data == ORDER
    assert result.value == ORDER


def test_the_last_block_that_validates_wins() -> None:
    text = 'One: {"id": 1, "items": []}\nTwo: {"id": 2, "items": []}\nWrong: {"x": 3}'
    assert json_parser(Order)(text).data == Order(id=2, items=[])


def test_non_model_types_are_supported() -> None:
    assert json_parser(list[int])("The numbers: [1, 2, 3]").data == [1, 2, 3]
    assert json_parser(dict[str, float])('{"a": 1.5}').data == {"a": 1.5}
    assert json_parser(int)("42").data == 42


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "tea", "qty": 2}\n{"name": "milk", "qty": 1}',
        '{"name": "tea", "qty": 2}, {"name": "milk", "qty": 1}',
        '```json\n{"name": "tea", "qty": 2}\n{"name": "milk", "qty": 1}\n```',
    ],
)
def test_a_list_written_as_its_objects_one_after_another_is_read_whole(text: str) -> None:
    assert json_parser(list[Item])(text).data == [Item(name="tea", qty=2), Item(name="milk", qty=1)]


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "tea", "qty": 2} and then {"name": "milk", "qty": 1}',  # prose between
        '{"name": "tea", "qty": 2}\n{"name": "milk", "qty": 1',  # the second cut short
    ],
)
def test_objects_with_anything_else_between_or_after_are_not_taken_as_a_list(text: str) -> None:
    result = json_parser(list[Item])(text)
    assert not result.ok and "Input should be a valid array" in str(result.feedback)


def test_objects_one_after_another_are_not_a_list_when_an_object_is_expected() -> None:
    text = '{"id": 1, "items": []}\n{"id": 2, "items": []}'
    assert json_parser(Order)(text).data == Order(id=2, items=[])


def test_validation_is_json_mode() -> None:
    # JSON mode: a list becomes a tuple, a string becomes bytes, as pydantic does for JSON.
    assert json_parser(tuple[int, bytes])('[1, "x"]').data == (1, b"x")


def test_instructions_show_the_json_schema_and_its_shape() -> None:
    parser = json_parser(Order)
    schema = json.dumps(TypeAdapter(Order).json_schema(), separators=(",", ":"))
    assert parser.schema_text == schema
    assert parser.instructions == default_templates().render(
        "output_json", schema=schema, example=parser.example
    )
    assert parser.instructions.splitlines()[1] == schema
    assert parser.instructions.splitlines()[2] == (
        f"Shaped like this, each <...> replaced by its value as JSON: {parser.example}"
    )
    assert json_parser(Order, instructions="Reply in JSON.").instructions == "Reply in JSON."


def test_a_scalar_output_is_shown_its_schema_alone() -> None:
    parser = json_parser(int)
    assert parser.example is None
    assert "Shaped like this" not in parser.instructions


def test_missing_json_gets_the_not_found_feedback() -> None:
    result = json_parser(Order)("I could not find any order.")
    assert not result.ok
    assert result.feedback == default_templates().render("json_not_found").strip()


def test_malformed_json_gets_line_column_and_excerpt() -> None:
    text = 'Order:\n```json\n{\n  "id": 7\n  "items": []\n}\n```'
    result = json_parser(Order)(text)
    assert not result.ok
    assert result.feedback == (
        "Your answer's JSON is malformed: Expecting ',' delimiter at line 3, column 3, near:\n"
        "```\n"
        '  "items": []\n'
        "  ^\n"
        "```\n"
        "Reply with valid JSON only."
    )


def test_invalid_fields_are_listed_with_location_message_and_received_value() -> None:
    text = '{"id": "seven", "items": [{"name": "tea", "qty": "lots"}, {"qty": 1}]}'
    result = json_parser(Order)(text)
    assert not result.ok
    lines = result.feedback.splitlines()
    assert lines[0] == "Your answer does not match the required output:"
    assert lines[1].startswith("- id: Input should be a valid integer")
    assert lines[1].endswith('(received "seven")')
    assert lines[2].startswith("- items.0.qty: Input should be a valid integer")
    assert lines[2].endswith('(received "lots")')
    assert lines[3] == "- items.1.name: Field required"


def test_a_malformed_last_block_is_reported_over_an_earlier_invalid_one() -> None:
    text = 'Old: {"id": "x", "items": []}\nNew: {"id": 1 "items": []}'
    result = json_parser(Order)(text)
    assert "malformed" in result.feedback
    assert "Expecting ',' delimiter" in result.feedback


def test_a_candidate_of_the_wrong_shape_does_not_shadow_the_answer_in_errors() -> None:
    text = '{"id": "x", "items": []}\nSee [1].'
    result = json_parser(Order)(text)
    assert (
        '- id: Input should be a valid integer, unable to parse string as an integer (received "x")'
        in result.feedback
    )
    assert "(root)" not in result.feedback


def test_a_wrong_shape_is_still_reported_when_it_is_all_there_is() -> None:
    result = json_parser(Order)("[1, 2]")
    assert "- (root): Input should be an object (received [1, 2])" in result.feedback


def test_feedback_uses_the_given_templates() -> None:
    templates = default_templates().with_overrides({"json_not_found": "NO JSON"})
    assert json_parser(Order)("nothing", templates=templates).feedback == "NO JSON"


def test_types_pydantic_cannot_validate_are_rejected_at_construction() -> None:
    class Opaque:
        pass

    with pytest.raises(ConfigurationError, match="output_type"):
        json_parser(Opaque)


def test_the_parser_has_a_name_and_repr() -> None:
    parser = json_parser(Order)
    assert isinstance(parser, JSONParser)
    assert parser.__name__ == "json_parser"
    assert "json_parser(" in repr(parser)


# --- format_validation_errors -------------------------------------------------------------


def _errors(model: type[BaseModel], data: object) -> list[dict[str, str]]:
    with pytest.raises(ValidationError) as info:
        model.model_validate(data)
    return format_validation_errors(info.value)


def test_format_validation_errors_gives_dotted_locations_and_received_values() -> None:
    assert _errors(Order, {"id": 1, "items": [{"name": 5, "qty": 1}]}) == [
        {"location": "items.0.name", "message": "Input should be a valid string", "received": "5"}
    ]


def test_format_validation_errors_leaves_received_empty_for_missing_fields() -> None:
    assert _errors(Item, {"name": "x"}) == [
        {"location": "qty", "message": "Field required", "received": ""}
    ]


def test_format_validation_errors_uses_root_for_the_whole_value() -> None:
    (error,) = _errors(Item, [1])
    assert error["location"] == "(root)"
    assert error["received"] == "[1]"


def test_format_validation_errors_shortens_long_received_values() -> None:
    (error,) = _errors(Item, {"name": "x", "qty": "y" * 500})
    assert len(error["received"]) == 80
    assert error["received"].endswith("…")


def test_format_validation_errors_keeps_custom_validator_messages() -> None:
    class Positive(BaseModel):
        n: int

        @field_validator("n")
        @classmethod
        def _positive(cls, value: int) -> int:
            if value <= 0:
                raise ValueError("must be positive")
            return value

    assert _errors(Positive, {"n": -1}) == [
        {"location": "n", "message": "Value error, must be positive", "received": "-1"}
    ]


# --- with a SubAgent ----------------------------------------------------------------------


@pytest.mark.anyio
async def test_json_parser_drives_a_subagent_through_a_correction() -> None:
    llm = ScriptedLLM(['{"id": 7, "items": [{"name": "tea"}]}', f"Fixed: {ORDER_JSON}"])
    agent = SubAgent(name="orders", prompt="Extract.", output=json_parser(Order), return_retries=1)
    step = await agent.run(llm=llm, max_turns=1)
    assert step.ok
    assert step.output == ORDER
    assert step.turns[0].feedback is not None
    assert "- items.0.qty: Field required" in step.turns[0].feedback
    assert json_parser(Order).instructions in llm.requests[0].messages[0].content


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")
    items: list[Item]
    scores: dict[str, int]


@pytest.mark.parametrize(
    ("reply", "summary"),
    [
        ("no json at all", "no JSON found"),
        ('{"items": [}', "invalid JSON at line 1 column 12"),
        ('{"items": [{"name": "a", "qty": "many"}], "scores": {}}', "items.0.qty: int_parsing"),
        (
            '{"items": [{"name": "a", "qty": 1}, {}], "scores": {"zebra": "x"}, "zebra": 1}',
            "items.1.name: missing; items.1.qty: missing; scores.*: int_parsing;"
            " *: extra_forbidden",
        ),
    ],
)
def test_failure_summary_names_schema_fields_and_hides_keys_the_reply_made_up(
    reply: str, summary: str
) -> None:
    assert json_parser(Strict)(reply).summary == summary
