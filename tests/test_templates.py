"""The strict Mustache wrapper: no escaping, missing variables are errors, overrides."""

from __future__ import annotations

import pytest

from subagent import MissingVariableError, TemplateError
from subagent._templates import (
    REQUIRED_VARIABLES,
    TEMPLATE_VARIABLES,
    Template,
    TemplateSet,
    default_templates,
    prompts_dir,
)


def test_values_are_never_html_escaped() -> None:
    rendered = Template("t", "a {{x}} b {{{x}}} c {{&x}}").render({"x": '<"&>'})
    assert rendered == 'a <"&> b <"&> c <"&>'


def test_missing_variable_is_an_error_naming_it_and_the_template() -> None:
    with pytest.raises(MissingVariableError) as caught:
        Template("greeting", "Hello {{name}}").render({})
    assert caught.value.variable == "name" and caught.value.template == "greeting"
    assert "'name'" in str(caught.value) and "'greeting'" in str(caught.value)


def test_missing_section_name_is_an_error_too() -> None:
    with pytest.raises(MissingVariableError, match="'flag'"):
        Template("t", "{{#flag}}x{{/flag}}").render({})
    with pytest.raises(MissingVariableError, match="'flag'"):
        Template("t", "{{^flag}}x{{/flag}}").render({})


def test_missing_name_inside_a_list_section_is_an_error() -> None:
    with pytest.raises(MissingVariableError, match="'age'"):
        Template("t", "{{#people}}{{name}} {{age}}{{/people}}").render({"people": [{"name": "a"}]})


def test_sections_iterate_lists_and_fall_back_to_outer_scopes() -> None:
    template = Template("t", "{{#items}}{{.}}{{sep}}{{/items}}")
    assert template.render({"items": [1, 2], "sep": ";"}) == "1;2;"


def test_inverted_sections_render_for_falsy_values() -> None:
    template = Template("t", "{{^items}}none{{/items}}{{#ok}}yes{{/ok}}")
    assert template.render({"items": [], "ok": True}) == "noneyes"


def test_dotted_names_and_attributes_resolve() -> None:
    class Box:
        def __init__(self) -> None:
            self.inner = {"value": 7}

    assert Template("t", "{{box.inner.value}}").render({"box": Box()}) == "7"
    with pytest.raises(MissingVariableError, match=r"'box\.inner\.nope'"):
        Template("t", "{{box.inner.nope}}").render({"box": Box()})


def test_none_renders_as_empty_but_zero_and_false_render() -> None:
    assert Template("t", "[{{a}}|{{b}}|{{c}}]").render({"a": None, "b": 0, "c": False}) == (
        "[|0|False]"
    )


def test_unclosed_section_is_a_template_error() -> None:
    with pytest.raises(TemplateError, match="'broken'"):
        Template("broken", "{{#a}}never closed")


def test_partials_come_from_the_same_set() -> None:
    templates = TemplateSet({"outer": Template("outer", "<{{> inner}}>"),
                             "inner": Template("inner", "{{x}}")})  # fmt: skip
    assert templates.render("outer", x="y") == "<y>"
    with pytest.raises(TemplateError, match="unknown partial 'missing'"):
        Template("t", "{{> missing}}").render({}, templates)


def test_templates_are_compiled_once_per_process() -> None:
    assert default_templates() is default_templates()


def test_every_shipped_template_is_loaded() -> None:
    names = {path.stem for path in prompts_dir().glob("*.mustache")}
    assert names == set(default_templates())
    assert {"system", "must_return_warning", "retry_feedback", "error_feedback",
            "tool_list"} <= names  # fmt: skip


def test_retry_feedback_says_correction_attempt_m_of_n() -> None:
    text = default_templates().render(
        "retry_feedback", error_message='bad "x"', current_retry=2, total_retries=3, repeated=True
    )
    assert "Correction attempt 2 of 3" in text
    assert 'still had an error:\nbad "x"' in text


def test_overrides_replace_templates_by_name() -> None:
    templates = default_templates().with_overrides({"truncated_reply": "Too long, shorter!"})
    assert templates["truncated_reply"].source == "Too long, shorter!"
    assert default_templates()["truncated_reply"].source != templates["truncated_reply"].source


def test_unknown_override_name_is_rejected_listing_known_names() -> None:
    with pytest.raises(TemplateError, match=r"unknown prompt template\(s\) \['sytem'\]"):
        default_templates().with_overrides({"sytem": "x"})


# --- overrides checked when they are set ---------------------------------------------------


def test_the_variables_table_names_every_shipped_template_and_what_it_reads() -> None:
    templates = default_templates()
    assert set(TEMPLATE_VARIABLES) == set(templates)
    for name, template in templates.items():
        assert template.free_names() <= TEMPLATE_VARIABLES[name], name


def test_every_shipped_template_passes_the_override_check() -> None:
    templates = default_templates()
    overridden = templates.with_overrides({name: t.source for name, t in templates.items()})
    assert set(overridden) == set(templates)


def test_an_override_reading_a_variable_its_template_is_not_given_is_refused() -> None:
    with pytest.raises(TemplateError) as caught:
        default_templates().with_overrides({"retry_feedback": "Fix: {{error}} {{error_message}}"})
    message = str(caught.value)
    assert "'retry_feedback' reads {{error}}" in message
    assert "current_retry, error_message, repeated, total_retries" in message
    assert caught.value.template == "retry_feedback"


def test_names_inside_an_inverted_section_are_checked_but_a_sections_items_are_not() -> None:
    with pytest.raises(TemplateError, match=r"reads \{\{oops\}\}"):
        default_templates().with_overrides(
            {"divider_missing": "{{^found_one}}{{oops}}{{/found_one}}"}
        )
    # Inside {{#errors}}, {{location}} is read from each error: allowed.
    default_templates().with_overrides({"invalid_output": "{{#errors}}{{location}}{{/errors}}"})


@pytest.mark.parametrize(("name", "required"), list(REQUIRED_VARIABLES.items()))
def test_a_system_override_that_drops_the_answers_format_is_refused(
    name: str, required: str
) -> None:
    with pytest.raises(TemplateError) as caught:
        default_templates().with_overrides({name: "You are {{agent_name}}. Be brief."})
    assert f"leaves out {{{{{required}}}}}" in str(caught.value)
    assert "instructions=" in str(caught.value)
    kept = default_templates().with_overrides({name: f"Be brief.\n{{{{{required}}}}}"})
    assert kept[name].reads(required)


# --- structured values as JSON ------------------------------------------------------------------


def test_structured_values_are_rendered_as_json_not_as_python_repr() -> None:
    import dataclasses

    from pydantic import BaseModel

    class Item(BaseModel):
        name: str
        tags: list[str]

    @dataclasses.dataclass
    class Point:
        x: int
        y: int

    template = Template("t", "{{d}} | {{l}} | {{m}} | {{p}} | {{t}} | {{n}} | {{b}}")
    text = template.render({
        "d": {"city": "Zürich", "ok": True, "none": None}, "l": ["a", 1],
        "m": Item(name="x", tags=["y"]), "p": Point(1, 2), "t": ("u",), "n": 3, "b": False,
    })  # fmt: skip
    assert text == (
        '{"city": "Zürich", "ok": true, "none": null} | ["a", 1] | '
        '{"name": "x", "tags": ["y"]} | {"x": 1, "y": 2} | ["u"] | 3 | False'
    )


def test_a_value_json_cannot_hold_is_written_as_pydantic_writes_it_or_as_its_str() -> None:
    import datetime

    text = Template("t", "{{v}}").render({"v": {"when": datetime.date(2024, 5, 1), "what": object}})
    assert text == '{"when": "2024-05-01", "what": "<class \'object\'>"}'


def test_dotted_names_still_reach_into_structured_values() -> None:
    assert Template("t", "{{d.city}} {{l.0}}").render({"d": {"city": "Oslo"}, "l": ["a"]}) == (
        "Oslo a"
    )
