import json
import time

import pytest

from subagent.parsers._json_extract import extract_json, iter_json_candidates, repair_json


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('{"a": 1}', {"a": 1}),
        ("  [1, 2]\n", [1, 2]),
        ('"just a string"', "just a string"),
        ("42", 42),
        ("null", None),
        ("true", True),
    ],
)
def test_a_reply_that_is_json_decodes_whole(text: str, value: object) -> None:
    extraction = extract_json(text)
    assert extraction.ok
    assert extraction.value == value
    assert not extraction.repaired


def test_a_fenced_json_block_in_prose_is_extracted() -> None:
    text = 'Here you go:\n```json\n{"a": [1, 2]}\n```\nAnything else?'
    assert extract_json(text).value == {"a": [1, 2]}


def test_an_untagged_fence_is_extracted() -> None:
    assert extract_json("Result:\n```\n[3]\n```").value == [3]


def test_json_after_prose_is_extracted() -> None:
    assert extract_json('The answer is {"a": "b"}').value == {"a": "b"}


def test_the_last_of_several_fenced_blocks_wins() -> None:
    text = 'Draft:\n```json\n{"v": 1}\n```\nFinal:\n```json\n{"v": 2}\n```'
    assert extract_json(text).value == {"v": 2}


def test_the_last_of_several_objects_in_prose_wins() -> None:
    assert extract_json('first {"v": 1}, then {"v": 2}.').value == {"v": 2}


def test_an_unclosed_brace_in_prose_does_not_hide_later_json() -> None:
    assert extract_json('Use { to open an object. Answer: {"a": 1}').value == {"a": 1}


def test_a_stray_quote_in_prose_does_not_hide_later_json() -> None:
    text = 'It is 5" long { really.\nAnswer: {"a": "x"}'
    assert extract_json(text).value == {"a": "x"}


def test_brackets_and_quotes_inside_strings_are_not_structure() -> None:
    text = 'Result: {"a": "}{][", "b": "say \\"hi\\" ]"} done'
    assert extract_json(text).value == {"a": "}{][", "b": 'say "hi" ]'}


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('{"a": 1,}', {"a": 1}),
        ("[1, 2,\n  ]", [1, 2]),
        ('{"a": [1,],\n "b": {"c": 2,},\n}', {"a": [1], "b": {"c": 2}}),
        ('{"a": 1, // the count\n "b": 2 // last\n}', {"a": 1, "b": 2}),
        ('{"a": 1, // comment, with a comma\n}', {"a": 1}),
    ],
)
def test_trailing_commas_and_line_comments_are_repaired(text: str, value: object) -> None:
    extraction = extract_json(text)
    assert extraction.ok
    assert extraction.value == value
    assert extraction.repaired


def test_repairs_leave_strings_alone() -> None:
    text = '{"url": "http://example.com", "s": "a,}", "t": "x // y",}'
    assert extract_json(text).value == {"url": "http://example.com", "s": "a,}", "t": "x // y"}


def test_repair_keeps_every_character_in_place() -> None:
    text = '{"a": 1, // note\n "b": [2,],\n}'
    repaired = repair_json(text)
    assert len(repaired) == len(text)
    assert repaired.split("\n")[1] == ' "b": [2 ] '
    assert json.loads(repaired) == {"a": 1, "b": [2]}


def test_a_syntax_error_reports_line_column_and_an_excerpt_with_a_caret() -> None:
    text = '```json\n{\n  "a": 1\n  "b": 2\n}\n```'
    extraction = extract_json(text)
    assert extraction.found
    assert not extraction.ok
    assert extraction.error == "Expecting ',' delimiter"
    assert (extraction.line, extraction.column) == (3, 3)
    assert extraction.excerpt == '  "b": 2\n  ^'


def test_error_positions_point_into_the_original_text_after_a_repair() -> None:
    text = '{"a": 1, // fine\n "b": [1,],\n "c": nope}'
    extraction = extract_json(text)
    assert (extraction.line, extraction.column) == (3, 7)
    assert extraction.excerpt == ' "c": nope}\n      ^'


def test_a_long_error_line_is_cut_around_the_error() -> None:
    text = "[" + ", ".join(["1"] * 100) + ", oops, " + ", ".join(["2"] * 100) + "]"
    extraction = extract_json(text)
    first, caret = extraction.excerpt.split("\n")
    assert first.startswith("…")
    assert first.endswith("…")
    assert len(first) <= 82
    assert first[caret.index("^") :].startswith("oops")


def test_mismatched_brackets_still_yield_a_candidate_with_its_error() -> None:
    extraction = extract_json('Answer: {"a": [1, 2}')
    assert extraction.found
    assert extraction.error == "Expecting ',' delimiter"


@pytest.mark.parametrize("text", ["", "   ", "no json here", "3 apples", "null and void", "-"])
def test_prose_without_json_is_not_found(text: str) -> None:
    extraction = extract_json(text)
    assert not extraction.found
    assert not extraction.ok


def test_candidates_come_whole_then_fences_then_spans_last_first() -> None:
    text = '{"v": 0} and\n```json\n{"v": 1}\n```\nthen ```\n{"v": 2}\n``` and {"v": 3}'
    candidates = list(iter_json_candidates(text))
    assert [c.value for c in candidates[:4]] == [{"v": 2}, {"v": 1}, {"v": 3}, {"v": 0}]
    assert candidates[4].text == text  # the whole reply, which does not decode, comes last
    assert candidates[4].error == "Extra data"
    assert len(candidates) == 5


def test_a_reply_that_starts_like_json_but_is_not_is_the_last_candidate() -> None:
    text = '{"a": 1} is what I think, or maybe [2]'
    candidates = list(iter_json_candidates(text))
    assert [c.value for c in candidates[:2]] == [[2], {"a": 1}]
    assert candidates[-1].error == "Extra data"


def test_pathological_brackets_are_scanned_in_linear_time() -> None:
    text = "[" * 200_000 + "}" * 200_000 + '{"a": 1}'
    started = time.perf_counter()
    assert extract_json(text).value == {"a": 1}
    assert time.perf_counter() - started < 2.0


def test_nesting_too_deep_for_the_decoder_is_a_syntax_error_not_a_crash() -> None:
    extraction = extract_json("[" * 100_000 + "]" * 100_000)
    assert extraction.found
    assert extraction.error == "Nesting too deep"
    assert (extraction.line, extraction.column) == (1, 1)
