"""The ReAct reply reader: actions, final answers, tolerance, problems, bounds."""

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import json_values

from subagent.protocols import read_react_reply
from subagent.protocols._action import MAX_REACT_REPLY_CHARS, ReactReply, format_action

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ACTION = 'Action: {"tool": "search", "input": {"q": "x"}}'


def assert_action(reply: ReactReply, tool: str, arguments: dict[str, Any]) -> None:
    assert reply.kind == "action", reply.problem
    assert (reply.tool, reply.arguments) == (tool, arguments)
    assert reply.problem == ""


def assert_invalid(reply: ReactReply, *fragments: str) -> None:
    assert reply.kind == "invalid", reply
    assert 0 < len(reply.problem) <= 300
    for fragment in fragments:
        assert fragment in reply.problem


# --- the two forms ------------------------------------------------------------------------


def test_an_action_gives_the_tool_and_its_arguments() -> None:
    reply = read_react_reply('Thought: I need data.\nAction: {"tool": "search", "input": {"q": 1}}')
    assert_action(reply, "search", {"q": 1})
    assert reply.thought == "I need data."
    assert (reply.answer, reply.extra_actions, reply.repaired, reply.truncated) == ("", 0, 0, 0)


def test_a_final_answer_gives_the_text_after_the_marker_stripped() -> None:
    reply = read_react_reply("Thought: I know it.\nFinal Answer:  The capital is Paris.\n\n")
    assert reply.kind == "answer"
    assert reply.answer == "The capital is Paris."
    assert reply.thought == "I know it."
    assert reply.problem == ""


def test_a_final_answer_keeps_every_line_after_the_marker() -> None:
    reply = read_react_reply("Final Answer:\n- one\n- two\n\nAction: is a word here")
    assert reply.answer == "- one\n- two\n\nAction: is a word here"


def test_the_thought_keeps_text_before_its_marker_and_drops_the_marker() -> None:
    reply = read_react_reply("Sure.\nThought: search first\n" + ACTION)
    assert reply.thought == "Sure.\nsearch first"


def test_a_reply_without_a_thought_marker_has_the_text_before_the_action_as_thought() -> None:
    assert read_react_reply("I will search.\n" + ACTION).thought == "I will search."


# --- markers ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "marker",
    [
        "Action:",
        "ACTION:",
        "action:",
        "Action :",
        "**Action:**",
        "**Action**:",
        "__Action__:",
        "*Action:*",
        "### Action",
        "> Action:",
        "  Action:",
    ],
)
def test_action_markers_are_read_in_any_case_and_with_markdown(marker: str) -> None:
    reply = read_react_reply(f'Thought: x\n{marker}\n{{"tool": "t", "input": {{}}}}')
    assert_action(reply, "t", {})
    assert reply.thought == "x"


@pytest.mark.parametrize(
    "marker",
    [
        "Final Answer:",
        "FINAL ANSWER:",
        "final answer:",
        "Final answer :",
        "Final_Answer:",
        "**Final Answer:**",
        "**Final Answer**:",
        "### Final Answer",
        "## **Final Answer**",
    ],
)
def test_final_answer_markers_are_read_in_any_case_and_with_markdown(marker: str) -> None:
    reply = read_react_reply(f"Thought: x\n{marker}\n42")
    assert reply.kind == "answer"
    assert reply.answer == "42"


@pytest.mark.parametrize(
    "text",
    [
        "Actions: none needed",
        "Action items are listed below",
        "Thoughtful: maybe",
        "Final answers vary",
        "Final Answer is 42",
    ],
)
def test_a_word_that_only_starts_like_a_marker_is_not_one(text: str) -> None:
    assert_invalid(read_react_reply(text), 'no "Action:" and no "Final Answer:"')


def test_markers_inside_a_line_count_when_no_line_starts_with_one() -> None:
    reply = read_react_reply('Thought: I will look. Action: {"tool": "t", "input": {"a": 1}}')
    assert_action(reply, "t", {"a": 1})
    assert reply.thought == "I will look."
    reply = read_react_reply("Thought: easy. **Final Answer:** 4")
    assert (reply.kind, reply.answer, reply.thought) == ("answer", "4", "easy.")


def test_a_marker_inside_a_line_is_ignored_when_a_line_starts_with_one() -> None:
    text = 'Thought: the format is Action: {"tool": "t", "input": {}}\nFinal Answer: 3'
    reply = read_react_reply(text)
    assert (reply.kind, reply.answer) == ("answer", "3")


# --- which part counts --------------------------------------------------------------------


def test_a_final_answer_after_an_action_is_ignored() -> None:
    reply = read_react_reply(ACTION + "\nObservation: x\nThought: done\nFinal Answer: 42")
    assert_action(reply, "search", {"q": "x"})
    assert reply.answer == ""


def test_an_action_after_a_final_answer_belongs_to_the_answer() -> None:
    reply = read_react_reply("Final Answer: use this line:\n" + ACTION)
    assert reply.kind == "answer"
    assert reply.answer == "use this line:\n" + ACTION


@pytest.mark.parametrize(
    "after",
    [
        "\nObservation: the search returned 3 results",
        " and then I will summarise.",
        "\n\nI'll wait for the result {of course}.",
        "\n```",
    ],
)
def test_prose_after_the_action_is_ignored(after: str) -> None:
    assert_action(read_react_reply(ACTION + after), "search", {"q": "x"})


def test_further_actions_are_counted_and_not_taken() -> None:
    text = (
        ACTION
        + '\nObservation: ...\nAction: {"tool": "fetch", "input": {}}'
        + '\nAction: {"tool": "other", "input": {}}'
    )
    reply = read_react_reply(text)
    assert_action(reply, "search", {"q": "x"})
    assert reply.extra_actions == 2


def test_a_list_of_actions_gives_the_first_and_counts_the_rest() -> None:
    reply = read_react_reply('Action: [{"tool": "a", "input": {}}, {"tool": "b", "input": {}}]')
    assert_action(reply, "a", {})
    assert reply.extra_actions == 1


# --- JSON tolerance -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        '```json\n{"tool": "t", "input": {"a": 1}}\n```',
        '```\n{"tool": "t", "input": {"a": 1}}\n```',
        '```JSON\n{"tool": "t", "input": {"a": 1}}\n```\nObservation: x',
        '`{"tool": "t", "input": {"a": 1}}`',
    ],
)
def test_the_action_json_may_be_in_a_code_fence(body: str) -> None:
    assert_action(read_react_reply("Thought: x\nAction:\n" + body), "t", {"a": 1})


@pytest.mark.parametrize(
    "body",
    [
        '{"tool": "t", "input": {"a": 1,},}',
        '{"tool": "t", // the tool\n "input": {"a": 1} // its input\n}',
        '```json\n{"tool": "t",\n "input": {"a": 1,},\n}\n```',
    ],
)
def test_trailing_commas_and_comments_are_repaired(body: str) -> None:
    reply = read_react_reply("Action: " + body)
    assert_action(reply, "t", {"a": 1})
    assert reply.repaired
    assert not reply.truncated


def test_raw_newlines_inside_strings_are_read() -> None:
    reply = read_react_reply(
        'Action: {"tool": "write", "input": {"code": "def f():\n\treturn 1\nFinal Answer: no"}}'
    )
    assert_action(reply, "write", {"code": "def f():\n\treturn 1\nFinal Answer: no"})
    assert reply.repaired


def test_single_quotes_are_read_as_json_strings() -> None:
    reply = read_react_reply("Action: {'tool': 'search', 'input': {'q': 'x'}}")
    assert_action(reply, "search", {"q": "x"})
    assert reply.repaired


def test_the_quote_repair_leaves_apostrophes_in_double_quoted_strings_alone() -> None:
    text = """Action: {'tool': 'note', 'input': {"text": "it's Bob's", 'n': 1}}"""
    reply = read_react_reply(text)
    assert_action(reply, "note", {"text": "it's Bob's", "n": 1})


def test_the_quote_repair_escapes_double_quotes_and_unescapes_single_ones() -> None:
    reply = read_react_reply(r"""Action: {'tool': 'say', 'input': {'s': 'He said "it\'s"'}}""")
    assert_action(reply, "say", {"s": 'He said "it\'s"'})


def test_python_literals_are_read_with_single_quotes() -> None:
    reply = read_react_reply("Action: {'tool': 't', 'input': {'a': True, 'b': None, 'c': False}}")
    assert_action(reply, "t", {"a": True, "b": None, "c": False})


def test_an_apostrophe_inside_single_quotes_is_ambiguous_and_invalid() -> None:
    reply = read_react_reply("Action: {'tool': 'search', 'input': {'q': 'it's'}}")
    # 'it' reads as a string (single quotes are repaired), then s' breaks the object
    assert_invalid(reply, "the Action is not valid JSON", "line 1 column 39")


def test_a_valid_action_is_not_marked_repaired() -> None:
    reply = read_react_reply("""Action: {"tool": "t", "input": {"s": "it's 'quoted' // no"}}""")
    assert_action(reply, "t", {"s": "it's 'quoted' // no"})
    assert not reply.repaired


@pytest.mark.parametrize(
    ("body", "arguments"),
    [
        ('{"tool": "t", "input": {"q": "weather in Par', {"q": "weather in Par"}),
        ('{"tool": "t", "input": {"q": "x"}', {"q": "x"}),
        ('{"tool": "t", "input": {"q": "x",', {"q": "x"}),
        ('{"tool": "t", "input": {"q": [1, 2', {"q": [1, 2]}),
        ('{"tool": "t", "input": {"q": [1, {"r": nul', {"q": [1, {"r": None}]}),
        ('{"tool": "t", "input": {"q": tr', {"q": True}),
        ('{"tool": "t", "input": {"q": "a\\u00', {"q": "a"}),
        ('{"tool": "t", "input": {"q": "a\\', {"q": "a"}),
        ('{"tool": "t", "input": {"q": "a\\\\', {"q": "a\\"}),
        ('{"tool": "t", "input": {"q": 12', {"q": 12}),
        ('{"tool": "t", "input": {"q": 1, // more to come', {"q": 1}),
        ("{'tool': 't', 'input': {'q': 'it", {"q": "it"}),
        ('```json\n{"tool": "t", "input": {"q": "x"', {"q": "x"}),
        ('{"tool": "t", "input": {', {}),
    ],
)
def test_a_block_cut_off_at_the_end_is_closed_when_unambiguous(
    body: str, arguments: dict[str, Any]
) -> None:
    reply = read_react_reply("Thought: x\nAction: " + body + "\n")
    assert_action(reply, "t", arguments)
    assert reply.repaired
    assert reply.truncated


@pytest.mark.parametrize(
    "body",
    [
        '{"tool": "t", "input": {"q',
        '{"tool": "t", "input": {"q"',
        '{"tool": "t", "input": {"q":',
        '{"tool": "t", "input": {"q": 1.',
        '{"tool": "t", "input": {"q": -',
        '{"tool": "t", "input": {"q": 1e',
    ],
)
def test_a_block_cut_off_where_any_ending_is_a_guess_is_invalid(body: str) -> None:
    reply = read_react_reply("Action: " + body)
    assert_invalid(reply, "the Action is cut off", "write a shorter Action")
    assert body[-10:] in reply.problem


@pytest.mark.parametrize("body", ['{"tool": "sea', '{"tool": "search"', '{"tool": "search", "inp'])
def test_a_block_cut_off_before_its_input_is_invalid(body: str) -> None:
    assert_invalid(read_react_reply("Action: " + body), "the Action is cut off")


def test_a_broken_block_followed_by_more_markers_is_not_taken_for_a_cut_off() -> None:
    reply = read_react_reply('Action: {"tool": "t", "input": {"q": "x"}\nObservation: found')
    assert_invalid(reply, "the Action is not valid JSON")
    assert not reply.truncated


def test_a_broken_block_with_a_syntax_error_before_the_end_is_not_closed() -> None:
    reply = read_react_reply('Action: {"tool": "t", "input": {"q": "x" "y"')
    assert_invalid(reply, "the Action is not valid JSON", "Expecting ',' delimiter")


# --- key names ----------------------------------------------------------------------------


@pytest.mark.parametrize("tool_key", ["tool", "name", "action", "tool_name"])
@pytest.mark.parametrize(
    "input_key",
    ["input", "inputs", "arguments", "args", "parameters", "action_input", "tool_input"],
)
def test_alternative_key_names_are_read(tool_key: str, input_key: str) -> None:
    action = json.dumps({tool_key: "t", input_key: {"a": 1}})
    assert_action(read_react_reply("Action: " + action), "t", {"a": 1})


def test_arguments_given_as_a_json_string_are_decoded() -> None:
    action = json.dumps({"name": "t", "arguments": json.dumps({"a": [1, 2]})})
    assert_action(read_react_reply("Action: " + action), "t", {"a": [1, 2]})


def test_without_an_input_key_the_other_keys_are_the_arguments() -> None:
    assert_action(read_react_reply('Action: {"tool": "t", "a": 1}'), "t", {"a": 1})
    assert_action(read_react_reply('Action: {"tool": "clock"}'), "clock", {})


@pytest.mark.parametrize("empty", ["null", '""', "{}"])
def test_an_empty_input_is_no_arguments(empty: str) -> None:
    assert_action(read_react_reply(f'Action: {{"tool": "t", "input": {empty}}}'), "t", {})


def test_the_tool_name_is_stripped() -> None:
    assert_action(read_react_reply('Action: {"tool": " t ", "input": {}}'), "t", {})


# --- LangChain's form and a name before the object ----------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        'Action: search\nAction Input: {"q": "x"}',
        'Action: `search`\nAction Input: {"q": "x"}\nObservation: ...',
        '**Action:** search\n**Action Input:**\n```json\n{"q": "x"}\n```',
        'action: "search"\naction_input: {"q": "x"}',
        "Action: search\nAction Input: {'q': 'x',}",
    ],
)
def test_an_action_name_with_an_action_input_is_read(text: str) -> None:
    assert_action(read_react_reply("Thought: look it up\n" + text), "search", {"q": "x"})


@pytest.mark.parametrize(
    "text",
    [
        'Action: search {"q": "x"}',
        'Action: search({"q": "x"})',
        'Action: search\n```json\n{"q": "x"}\n```',
    ],
)
def test_a_tool_name_before_an_object_without_a_tool_key_names_the_tool(text: str) -> None:
    assert_action(read_react_reply(text), "search", {"q": "x"})


def test_a_tool_name_may_start_with_an_underscore() -> None:
    assert_action(read_react_reply("Action: _private\nAction Input: {}"), "_private", {})


def test_an_action_input_that_is_not_a_json_object_is_invalid() -> None:
    reply = read_react_reply("Action: search\nAction Input: weather in Paris")
    assert_invalid(reply, "Action Input is not a JSON object", "'weather in Paris'", '"search"')


def test_an_action_input_without_an_action_is_invalid() -> None:
    reply = read_react_reply('Thought: x\nAction Input: {"q": 1}')
    assert_invalid(reply, '"Action Input:" but no "Action:"')


def test_an_action_input_after_prose_instead_of_a_name_is_invalid() -> None:
    reply = read_react_reply('Action: I will search\nAction Input: {"q": 1}')
    assert_invalid(reply, "must name one tool", "'I will search'")


# --- explicit fails -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ['{"fail": "no access to the file"}', '  ```json\n{"fail": "no access to the file"}\n```\n'],
)
def test_a_reply_that_is_only_an_explicit_fail_is_an_answer(text: str) -> None:
    reply = read_react_reply(text)
    assert reply.kind == "answer"
    assert reply.answer == text.strip()


def test_an_explicit_fail_as_the_final_answer_is_returned_as_the_answer() -> None:
    reply = read_react_reply('Thought: cannot.\nFinal Answer: {"fail": "no access"}')
    assert (reply.kind, reply.answer) == ("answer", '{"fail": "no access"}')


# --- problems -----------------------------------------------------------------------------


def test_a_reply_without_markers_is_invalid_and_says_what_to_write() -> None:
    reply = read_react_reply("The answer is probably 42.")
    assert_invalid(reply, 'no "Action:" and no "Final Answer:"', '{"tool": "<tool name>"')


def test_an_action_without_json_quotes_what_followed() -> None:
    reply = read_react_reply("Action: I will look this up in the index")
    assert_invalid(reply, "no JSON object", "'I will look this up in the index'", '"tool"')


def test_an_empty_action_says_nothing_follows() -> None:
    assert_invalid(read_react_reply("Thought: x\nAction:"), 'nothing follows "Action:"')


def test_a_bare_tool_name_without_input_shows_the_form_with_that_name() -> None:
    reply = read_react_reply("Action: search")
    assert_invalid(reply, '"Action: search" gives no input', '{"tool": "search", "input"')


def test_invalid_json_quotes_the_part_near_the_error() -> None:
    reply = read_react_reply('Action: {"tool": "search", "input": {"q": "x" "y"}}\nDone.')
    assert_invalid(
        reply, "the Action is not valid JSON: line 1 column 39: Expecting ',' delimiter", '"x" "y"'
    )


def test_an_action_without_a_tool_name_is_invalid() -> None:
    assert_invalid(
        read_react_reply('Action: {"input": {"q": 1}}'), "names no tool", '"tool" key', '"q": 1'
    )


@pytest.mark.parametrize("tool", ["1", '""', "null", '["a"]'])
def test_a_tool_name_that_is_not_a_name_is_invalid(tool: str) -> None:
    reply = read_react_reply(f'Action: {{"tool": {tool}, "input": {{}}}}')
    assert_invalid(reply, '"tool" must be a tool\'s name')


@pytest.mark.parametrize("value", ['"weather"', "[1, 2]", "3", '"[1]"'])
def test_an_input_that_is_not_an_object_is_invalid(value: str) -> None:
    reply = read_react_reply(f'Action: {{"tool": "t", "input": {value}}}')
    assert_invalid(reply, '"input" must be a JSON object of named arguments')


def test_an_action_that_is_not_an_object_is_invalid() -> None:
    assert_invalid(read_react_reply("Action: [1, 2]"), "must be one JSON object", "[1, 2]")


def test_an_empty_final_answer_is_invalid() -> None:
    reply = read_react_reply("Thought: done\nFinal Answer:   \n")
    assert_invalid(reply, '"Final Answer:" is empty')
    assert reply.thought == "done"


def test_problems_stay_short_for_long_replies() -> None:
    long = "word " * 5000
    for text in [
        "Action: " + long,
        'Action: {"tool": "t", "input": {"q": "' + long + '" "x"}}',
        'Action: {"tool": "t", "input": "' + long + '"}',
        'Action: {"input": {"q": "' + long + '"}}',
        'Action: {"tool": "t", "input": {"q": "x", "' + long,
    ]:
        assert_invalid(read_react_reply(text))


# --- bounds -------------------------------------------------------------------------------


def test_only_the_end_of_a_long_reply_is_read() -> None:
    reply = read_react_reply("x" * 100 + "\n" + ACTION, max_chars=len(ACTION) + 1)
    assert_action(reply, "search", {"q": "x"})
    assert reply.clipped
    reply = read_react_reply(ACTION + "\n" + "x" * 100, max_chars=100)
    assert_invalid(reply, 'no "Action:"')
    assert reply.clipped
    assert not read_react_reply(ACTION).clipped


def test_the_default_bound_is_256_kib() -> None:
    assert MAX_REACT_REPLY_CHARS == 256 * 1024
    reply = read_react_reply("Thought: " + "x" * MAX_REACT_REPLY_CHARS + "\n" + ACTION)
    assert_action(reply, "search", {"q": "x"})
    assert reply.clipped


def test_max_chars_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="max_chars"):
        read_react_reply(ACTION, max_chars=0)


ONE_MB = 1_000_000
ADVERSARIAL = {
    "action openers": 'Action: {"tool": "' * (ONE_MB // 18),
    "braces": "{" * ONE_MB,
    "brackets after a marker": "Action: " + "[" * ONE_MB,
    "quotes after a marker": 'Action: {"a": ' + '"' * ONE_MB,
    "single quotes after a marker": "Action: {'a': " + "'" * ONE_MB,
    "backslashes in a string": 'Action: {"tool": "t", "input": {"x": "' + "\\" * ONE_MB,
    "stars": "*" * ONE_MB,
    "a marker and spaces": "Action" + " " * ONE_MB + "x",
    "marker lines": "Action:\n" * (ONE_MB // 8),
    "inline markers": "action: " * (ONE_MB // 8),
    "commas": 'Action: {"a": [' + "1," * (ONE_MB // 2),
    "fail openers": '{"fail": ' + "[" * ONE_MB,
}


@pytest.mark.parametrize("name", list(ADVERSARIAL))
@pytest.mark.parametrize("max_chars", [MAX_REACT_REPLY_CHARS, None])
def test_adversarial_megabyte_replies_are_read_without_error(
    name: str, max_chars: int | None
) -> None:
    # No timing here (see the operation counts below); this runs every path on 1 MB.
    text = ADVERSARIAL[name]
    reply = read_react_reply(text, max_chars=max_chars or len(text))
    assert reply.kind in ("action", "answer", "invalid")
    assert len(reply.problem) <= 300


@contextmanager
def counting_lines() -> Iterator[list[int]]:
    """Count the Python lines executed (a machine-independent measure of work)."""
    count = [0]

    def tracer(frame: FrameType, event: str, arg: object) -> Callable[..., object]:
        count[0] += 1
        return tracer

    sys.settrace(tracer)
    try:
        yield count
    finally:
        sys.settrace(None)


@pytest.mark.parametrize(
    "make",
    [
        lambda n: 'Action: {"tool": "' * (n // 18),
        lambda n: "Action: " + "{" * n,
        lambda n: "Action: " + "[" * n,
        lambda n: 'Action: {"a": [' + '"x",' * (n // 4),
        lambda n: "Action: {'a': " + "'" * n,
        lambda n: "Action:\n" * (n // 8),
        lambda n: "action: " * (n // 8),
        lambda n: "Thought: " + "x" * n + "\n" + ACTION,
    ],
)
def test_the_python_work_grows_linearly_with_the_reply(make: Callable[[int], str]) -> None:
    # The regular expressions are linear by construction (see the module docstring); this
    # checks the Python loops around them: 4x the text, at most about 4x the lines run.
    counts = []
    for size in (4_000, 16_000):
        text = make(size)
        with counting_lines() as count:
            read_react_reply(text, max_chars=len(text))
        counts.append(count[0])
    assert counts[1] <= 4.5 * counts[0] + 200


# --- format_action ------------------------------------------------------------------------


def test_format_action_writes_the_canonical_line() -> None:
    assert format_action("search", {"q": "café"}) == (
        'Action: {"tool": "search", "input": {"q": "café"}}'
    )


def test_format_action_refuses_arguments_that_are_not_json() -> None:
    with pytest.raises(TypeError):
        format_action("t", {"when": object()})


# --- properties ---------------------------------------------------------------------------

TOOL_NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_-]{0,63}", fullmatch=True)
JSON_VALUES = json_values()
ARGUMENTS = st.dictionaries(st.text(max_size=10), JSON_VALUES, max_size=5)


@SETTINGS
@given(tool=TOOL_NAMES, arguments=ARGUMENTS)
def test_a_formatted_action_reads_back_as_itself(tool: str, arguments: dict[str, Any]) -> None:
    reply = read_react_reply("Thought: x\n" + format_action(tool, arguments))
    assert_action(reply, tool, arguments)
    assert reply.thought == "x"
    assert not reply.repaired


@SETTINGS
@given(tool=TOOL_NAMES, arguments=ARGUMENTS, data=st.data())
def test_a_formatted_action_cut_anywhere_never_names_another_tool(
    tool: str, arguments: dict[str, Any], data: st.DataObject
) -> None:
    text = "Thought: x\n" + format_action(tool, arguments)
    reply = read_react_reply(text[: data.draw(st.integers(0, len(text)))])
    assert reply.kind != "answer"
    if reply.kind == "action":
        assert reply.tool == tool


FRAGMENTS = st.sampled_from(
    [
        "Action:",
        "Action Input:",
        "Final Answer:",
        "Thought:",
        "Observation:",
        "**",
        "###",
        "```json\n",
        "```",
        "\n",
        " ",
        "{",
        "}",
        "[",
        "]",
        '"',
        "'",
        "\\",
        ":",
        ",",
        "//",
        '"tool"',
        '"input"',
        '"fail"',
        "search",
        "True",
        "tru",
        "1.",
        "-",
        "\\u00",
    ]
)
REPLIES = st.one_of(
    st.text(),
    st.lists(st.one_of(FRAGMENTS, st.text(max_size=3)), max_size=40).map("".join),
)


@SETTINGS
@given(text=REPLIES, max_chars=st.one_of(st.none(), st.integers(1, 64)))
def test_read_react_reply_never_raises_and_fills_the_fields_its_kind_needs(
    text: str, max_chars: int | None
) -> None:
    reply = read_react_reply(text, max_chars=max_chars or MAX_REACT_REPLY_CHARS)
    if reply.kind == "action":
        assert reply.tool.strip() == reply.tool != ""
        assert isinstance(reply.arguments, dict)
        assert reply.problem == reply.answer == ""
    elif reply.kind == "answer":
        assert reply.answer.strip() == reply.answer != ""
        assert reply.problem == reply.tool == ""
    else:
        assert 0 < len(reply.problem) <= 300
        assert reply.tool == reply.answer == ""
    assert reply.extra_actions >= 0
    assert reply.truncated <= reply.repaired


@SETTINGS
@given(fragment=FRAGMENTS, prefix=FRAGMENTS, count=st.integers(1, 3000))
def test_read_react_reply_never_raises_on_repetitions(
    fragment: str, prefix: str, count: int
) -> None:
    reply = read_react_reply(prefix + fragment * count)
    assert len(reply.problem) <= 300


@SETTINGS
@given(tool=TOOL_NAMES, arguments=ARGUMENTS, after=REPLIES)
def test_anything_after_a_formatted_action_is_ignored(
    tool: str, arguments: dict[str, Any], after: str
) -> None:
    reply = read_react_reply("Thought: x\n" + format_action(tool, arguments) + after)
    assert_action(reply, tool, arguments)
