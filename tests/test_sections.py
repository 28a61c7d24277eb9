import time

import pytest

from subagent import ConfigurationError, ScriptedLLM, SubAgent
from subagent._templates import default_templates
from subagent.parsers._sections import SectionsParser, multi_section_parser, sections_parser

HEADERS = ["[Plan]", "[Timeline]"]


# --- multi-section mode -------------------------------------------------------------------


def test_sections_are_keyed_by_the_headers_as_given_in_the_given_order() -> None:
    text = "[Timeline]\n3 weeks\n[Plan]\nread papers\n"
    result = multi_section_parser(text, HEADERS)
    assert result.ok
    assert result.sections == {"[Plan]": "read papers", "[Timeline]": "3 weeks"}
    assert list(result.sections) == HEADERS
    assert result.value == result.sections


def test_content_runs_to_the_next_header_and_is_stripped() -> None:
    text = "[Plan]\n\n  step one\n  step two\n\n[Timeline]\n  week 1  \n"
    result = multi_section_parser(text, HEADERS)
    assert result.sections == {"[Plan]": "step one\n  step two", "[Timeline]": "week 1"}


def test_text_before_the_first_header_is_ignored() -> None:
    text = "Sure, here is my plan.\n[Plan]\nA\n[Timeline]\nB"
    assert multi_section_parser(text, HEADERS).sections == {"[Plan]": "A", "[Timeline]": "B"}


def test_the_last_occurrence_of_a_repeated_header_wins() -> None:
    text = "[Plan]\ndraft\n[Timeline]\nB\n[Plan]\nfinal plan"
    assert multi_section_parser(text, HEADERS).sections == {
        "[Plan]": "final plan",
        "[Timeline]": "B",
    }


def test_a_header_inside_a_line_does_not_start_a_section() -> None:
    text = "[Plan]\nsee the [Timeline] below\n[Timeline]\nB"
    assert multi_section_parser(text, HEADERS).sections == {
        "[Plan]": "see the [Timeline] below",
        "[Timeline]": "B",
    }


def test_an_empty_section_is_accepted() -> None:
    assert multi_section_parser("[Plan]\n[Timeline]\nB", HEADERS).sections == {
        "[Plan]": "",
        "[Timeline]": "B",
    }


def test_crlf_and_cr_line_endings_are_read_as_newlines() -> None:
    text = "[Plan]\r\nline 1\r\nline 2\r\n[Timeline]\rB\r"
    assert multi_section_parser(text, HEADERS).sections == {
        "[Plan]": "line 1\nline 2",
        "[Timeline]": "B",
    }


def test_header_lines_and_header_arguments_may_carry_surrounding_whitespace() -> None:
    text = "   [Plan]  \nA\n\t[Timeline]\nB"
    result = multi_section_parser(text, [" [Plan] ", "[Timeline]"])
    assert result.sections == {" [Plan] ": "A", "[Timeline]": "B"}


@pytest.mark.parametrize(
    "line",
    [
        "**[Plan]**",
        "*[Plan]*",
        "__[Plan]__",
        "## [Plan]",
        "## Plan",
        "# Plan #",
        "### **Plan**",
        "**Plan**",
        "***Plan***",
        "**_Plan_**",
        "  ##   Plan   ",
    ],
)
def test_markdown_decorated_headers_match(line: str) -> None:
    result = multi_section_parser(f"{line}\nA\n[Timeline]\nB", HEADERS)
    assert result.sections == {"[Plan]": "A", "[Timeline]": "B"}


@pytest.mark.parametrize(
    "line",
    [
        "Plan",  # bare: as likely content as a heading
        "#Plan",  # not a Markdown heading (no space)
        "* Plan",  # a bullet
        "**Plan*",  # unbalanced emphasis
        "[plan]",  # case-sensitive
        "Plan:",
        "## Plan:",
        "[Plan] details",
    ],
)
def test_lines_that_are_not_the_header_do_not_match(line: str) -> None:
    result = multi_section_parser(f"{line}\nA\n[Timeline]\nB", HEADERS)
    assert not result.ok
    assert "[Plan]" in result.feedback


def test_unbracketed_headers_match_plain_and_decorated_lines() -> None:
    text = "Plan\nA\n## Timeline\nB"
    assert multi_section_parser(text, ["Plan", "Timeline"]).sections == {
        "Plan": "A",
        "Timeline": "B",
    }


def test_duplicate_headers_in_the_list_are_counted_once() -> None:
    result = multi_section_parser("[Plan]\nA", ["[Plan]", "[Plan]"])
    assert result.sections == {"[Plan]": "A"}


# --- feedback -----------------------------------------------------------------------------


def test_all_mode_feedback_names_each_missing_header_and_shows_the_layout() -> None:
    headers = ["[Plan]", "[Timeline]", "[Budget]"]
    result = multi_section_parser("[Plan]\nA", headers)
    assert not result.ok
    feedback = result.feedback
    assert "missing 2 required section(s)" in feedback
    assert "- [Timeline]\n" in feedback
    assert "- [Budget]\n" in feedback
    assert "- [Plan]" not in feedback
    assert "[Plan]\n...\n[Timeline]\n...\n[Budget]\n..." in feedback
    assert "complete answer" in feedback


def test_feedback_points_out_a_header_written_inside_a_line() -> None:
    result = multi_section_parser("[Plan]\nA\n[Timeline]: 3 weeks", HEADERS)
    assert "- [Timeline] (it appears inside a line of text" in result.feedback


def test_empty_text_misses_every_section() -> None:
    for text in ("", "   \n\n  "):
        result = multi_section_parser(text, HEADERS)
        assert not result.ok
        assert "- [Plan]\n" in result.feedback
        assert "- [Timeline]\n" in result.feedback


def test_any_mode_accepts_a_single_section() -> None:
    result = multi_section_parser("[Timeline]\nB", HEADERS, match_mode="ANY")
    assert result.ok
    assert result.sections == {"[Timeline]": "B"}


def test_any_mode_without_any_section_lists_the_headers() -> None:
    result = multi_section_parser("just prose", HEADERS, match_mode="ANY")
    assert not result.ok
    assert "none of the expected sections" in result.feedback
    assert "- [Plan]\n- [Timeline]" in result.feedback


def test_feedback_uses_the_given_templates() -> None:
    templates = default_templates().with_overrides(
        {"sections_missing": "MISSING:{{#missing}} {{header}}{{/missing}}"}
    )
    result = multi_section_parser("[Plan]\nA", HEADERS, templates=templates)
    assert result.feedback == "MISSING: [Timeline]"


# --- regex mode ---------------------------------------------------------------------------


def test_regex_headers_must_match_the_whole_stripped_line() -> None:
    text = "Step 1\nA\nStep 2 extra\nstill A\nNotes\nB"
    result = multi_section_parser(text, [r"Step \d+", "Notes"], regex_mode=True)
    assert result.sections == {r"Step \d+": "A\nStep 2 extra\nstill A", "Notes": "B"}


def test_regex_headers_match_inside_markdown_decoration() -> None:
    result = multi_section_parser("## Part 3\nA", [r"Part \d"], regex_mode=True)
    assert result.sections == {r"Part \d": "A"}


def test_regex_missing_feedback_names_the_pattern() -> None:
    result = multi_section_parser("nothing", [r"Part \d"], regex_mode=True)
    assert "a line matching the regular expression Part \\d" in result.feedback
    assert "Expected layout" not in result.feedback


# --- single-section (divider) mode --------------------------------------------------------


def test_divider_mode_returns_the_content_between_the_last_two_dividers() -> None:
    text = "intro\n=====\nold\n=====\nthinking\n  ==========  \n the answer \n=======\nfooter"
    result = multi_section_parser(text)
    assert result.ok
    assert result.data == "the answer"
    assert result.sections is None
    assert result.value == "the answer"


@pytest.mark.parametrize("divider", ["====", "===== x", "x =====", "=== ==="])
def test_lines_that_are_not_dividers_are_ignored(divider: str) -> None:
    result = multi_section_parser(f"=====\nanswer\n{divider}\n")
    assert not result.ok
    assert "only one divider line" in result.feedback


def test_divider_mode_without_dividers_explains_the_format() -> None:
    for text in ("", "an answer without dividers"):
        result = multi_section_parser(text)
        assert not result.ok
        assert "no divider lines" in result.feedback
        assert "=====\n(your answer)\n=====" in result.feedback


def test_divider_mode_rejects_empty_content() -> None:
    result = multi_section_parser("=====\n   \n=====")
    assert not result.ok
    assert "is empty" in result.feedback


def test_divider_mode_reads_crlf() -> None:
    assert multi_section_parser("=====\r\na\r\nb\r\n=====\r\n").data == "a\nb"


# --- invalid arguments --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"section_headers": []}, "section_headers"),
        ({"section_headers": "[Plan]"}, "section_headers"),
        ({"section_headers": ["[Plan]", "  "]}, "section_headers"),
        ({"section_headers": ["[Plan]", 3]}, "section_headers"),
        ({"section_headers": ["[Plan]\n[Timeline]"]}, "section_headers"),
        ({"section_headers": ["(unclosed"], "regex_mode": True}, "section_headers"),
        ({"section_headers": HEADERS, "match_mode": "all"}, "match_mode"),
        ({"section_headers": HEADERS, "match_mode": "SOME"}, "match_mode"),
        ({"match_mode": "SOME"}, "match_mode"),
    ],
)
def test_invalid_arguments_raise_value_errors_naming_the_argument(
    kwargs: dict[str, object], field: str
) -> None:
    with pytest.raises(ValueError, match=field) as info:
        multi_section_parser("text", **kwargs)  # type: ignore[arg-type]
    assert isinstance(info.value, ConfigurationError)
    assert info.value.field == field


# --- sections_parser ----------------------------------------------------------------------


def test_sections_parser_parses_like_multi_section_parser() -> None:
    parser = sections_parser(HEADERS)
    text = "**[Plan]**\nA\n## Timeline\nB"
    assert parser(text) == multi_section_parser(text, HEADERS)
    assert not parser("[Plan]\nA").ok


def test_sections_parser_carries_instructions_naming_the_headers() -> None:
    parser = sections_parser(HEADERS)
    assert parser.instructions == (
        "Organise your answer into these sections, each header alone on its own line "
        "followed by the section's content: [Plan], [Timeline]"
    )
    assert (
        "one or more of these sections" in sections_parser(HEADERS, match_mode="ANY").instructions
    )
    regex = sections_parser([r"Step \d+"], regex_mode=True)
    assert "regular expressions: Step \\d+" in regex.instructions
    assert sections_parser(HEADERS, instructions="Use [Plan].").instructions == "Use [Plan]."


def test_sections_parser_checks_its_arguments_at_construction() -> None:
    with pytest.raises(ConfigurationError, match="match_mode"):
        sections_parser(HEADERS, match_mode="any")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="headers"):
        sections_parser([])


@pytest.mark.parametrize(
    ("headers", "regex_mode"),
    [([], False), ("[Plan]", False), (["[Plan]", " "], False), (["a\nb"], False), (["("], True)],
)
def test_sections_parser_errors_name_its_own_argument_headers(
    headers: object, regex_mode: bool
) -> None:
    with pytest.raises(ConfigurationError) as info:
        sections_parser(headers, regex_mode=regex_mode)  # type: ignore[arg-type]
    assert info.value.field == "headers"
    assert str(info.value).startswith("headers: ")


def test_sections_parser_has_a_name_and_repr() -> None:
    parser = sections_parser(HEADERS, match_mode="ANY")
    assert isinstance(parser, SectionsParser)
    assert parser.__name__ == "sections_parser"
    assert repr(parser) == (
        "sections_parser(['[Plan]', '[Timeline]'], match_mode='ANY', regex_mode=False)"
    )


@pytest.mark.anyio
async def test_sections_parser_drives_a_subagent_with_feedback_and_instructions() -> None:
    llm = ScriptedLLM(["[Plan]\nA", "[Plan]\nA\n[Timeline]\nB"])
    agent = SubAgent(
        name="planner", prompt="Plan it.", output=sections_parser(HEADERS), return_retries=1
    )
    step = await agent.run(llm=llm, max_turns=1)
    assert step.ok
    assert step.output == {"[Plan]": "A", "[Timeline]": "B"}
    system = llm.requests[0].messages[0].content
    assert sections_parser(HEADERS).instructions in system
    assert step.turns[0].feedback is not None
    assert "- [Timeline]" in step.turns[0].feedback


# --- linear time --------------------------------------------------------------------------


def test_ten_thousand_headers_parse_in_linear_time() -> None:
    headers = [f"[Section {i}]" for i in range(10_000)]
    text = "\n".join(f"{h}\ncontent {i}" for i, h in enumerate(headers))
    started = time.perf_counter()
    result = multi_section_parser(text, headers)
    elapsed = time.perf_counter() - started
    assert result.ok
    assert result.sections is not None
    assert result.sections["[Section 9999]"] == "content 9999"
    # The seed's list lookups make this ~10^8 comparisons (seconds); one pass takes ~20 ms.
    assert elapsed < 1.0


def test_feedback_for_ten_thousand_missing_headers_is_linear_and_names_each() -> None:
    headers = [f"[Section {i}]" for i in range(10_000)]
    text = "\n".join(f"Section {i} content" for i in range(10_000))
    started = time.perf_counter()
    result = multi_section_parser(text, headers)
    elapsed = time.perf_counter() - started
    assert not result.ok
    assert "missing 10000 required section(s)" in result.feedback
    assert all(f"- {h}\n" in result.feedback for h in (headers[0], headers[5_000], headers[-1]))
    # One scan of the reply per missing header would be 10^4 scans of ~200 KB (seconds).
    assert elapsed < 1.0
