"""Reading a cut reply's first complete JSON value (eval/cut_replies.py)."""

from __future__ import annotations

from cut_replies import first_value


def test_the_value_the_first_bracket_opens_is_read_when_it_closes() -> None:
    text = 'Here: [{"name": "f", "arguments": {}}]\n[{"name": "g", "argu'
    assert first_value(text) == [{"name": "f", "arguments": {}}]


def test_a_value_inside_a_cut_one_is_never_taken_for_the_answer() -> None:
    cut = '[{"name": "poker", "arguments": {"players": ["Alex", "Sam"], "cards": {"Alex": [\'A'
    assert first_value(cut) is None
    assert first_value("no JSON at all") is None
