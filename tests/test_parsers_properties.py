"""Property-based tests: the parsers never raise on any text, and their round-trips hold."""

import json
import re
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict
from strategies import json_values

from subagent.parsers._json import json_parser, schema_names
from subagent.parsers._json_extract import extract_json, repair_json
from subagent.parsers._result import ParseResult
from subagent.parsers._sections import multi_section_parser

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Text rich in the characters the parsers care about, plus arbitrary unicode.
STRUCTURAL = st.text(alphabet='{}[]",:/\\\n\r\t =#*_`-.0123456789aetrufnl')
ANY_TEXT = st.one_of(st.text(), STRUCTURAL)
HEADER_NAMES = st.text(
    alphabet=st.characters(
        whitelist_categories=("L", "N"), whitelist_characters=" -&", max_codepoint=0x2FF
    ),
    min_size=1,
    max_size=15,
).filter(lambda name: name.strip() == name and name != "")


class Line(BaseModel):
    sku: str
    quantity: int
    price: float


class Invoice(BaseModel):
    number: int
    customer: str
    lines: list[Line]
    paid: bool = False
    notes: str | None = None


PARSER = json_parser(Invoice)


class Tally(BaseModel):
    """Keys the reply chooses (a dict) and keys it must not add (extra forbidden)."""

    model_config = ConfigDict(extra="forbid")
    counts: dict[str, int]
    lines: list[Line]


JSON_VALUES = json_values(allow_infinity=True)
NEAR_MISSES = st.fixed_dictionaries(
    {"counts": JSON_VALUES, "lines": st.lists(st.dictionaries(st.text(), JSON_VALUES), max_size=2)},
    optional={"number": JSON_VALUES, "customer": JSON_VALUES},
).flatmap(lambda known: st.dictionaries(st.text(), JSON_VALUES, max_size=3).map(
    lambda extra: {**extra, **known}))  # fmt: skip
FIXED_SUMMARY = re.compile(r"no JSON found|invalid JSON at line \d+ column \d+")


# --- never an exception -------------------------------------------------------------------


@SETTINGS
@given(
    text=ANY_TEXT,
    names=st.lists(HEADER_NAMES, min_size=1, max_size=4),
    regex_mode=st.booleans(),
    match_mode=st.sampled_from(["ALL", "ANY"]),
)
def test_multi_section_parser_returns_a_parse_result_for_any_text(
    text: str, names: list[str], regex_mode: bool, match_mode: Any
) -> None:
    headers = [re.escape(f"[{n}]") if regex_mode else f"[{n}]" for n in names]
    result = multi_section_parser(text, headers, regex_mode=regex_mode, match_mode=match_mode)
    assert isinstance(result, ParseResult)
    if result.ok:
        assert result.sections is not None
        assert set(result.sections) <= set(headers)
        if match_mode == "ALL":
            assert set(result.sections) == set(headers)
        else:
            assert result.sections
    else:
        assert result.feedback


@SETTINGS
@given(text=ANY_TEXT)
def test_divider_mode_returns_a_parse_result_for_any_text(text: str) -> None:
    result = multi_section_parser(text)
    assert isinstance(result, ParseResult)
    if result.ok:
        assert isinstance(result.data, str)
        assert result.data
        assert result.data == result.data.strip()
    else:
        assert result.feedback


@SETTINGS
@given(text=ANY_TEXT)
def test_json_parser_returns_a_parse_result_for_any_text(text: str) -> None:
    result = PARSER(text)
    assert isinstance(result, ParseResult)
    assert isinstance(result.data, Invoice) if result.ok else result.feedback


@SETTINGS
@given(
    reply=st.one_of(ANY_TEXT, JSON_VALUES.map(json.dumps), NEAR_MISSES.map(json.dumps)),
    output=st.sampled_from([Invoice, Tally]),
)
def test_a_failure_summary_holds_only_schema_names_and_error_types(
    reply: str, output: type[BaseModel]
) -> None:
    parser = json_parser(output)
    result = parser(reply)
    assume(not result.ok)
    assert result.summary  # what a trace shows when message content is not captured
    if FIXED_SUMMARY.fullmatch(result.summary):
        return
    names = schema_names(parser.schema)
    for error in result.summary.split("; "):
        where, _, kind = error.rpartition(": ")
        assert re.fullmatch("[a-z_]+", kind), error
        for part in where.split("."):
            assert part in names or part.isdigit() or part in ("*", "(root)"), error


@SETTINGS
@given(text=ANY_TEXT)
def test_extract_json_never_raises_and_repairs_keep_length(text: str) -> None:
    extraction = extract_json(text)
    if extraction.ok:
        json.loads(extraction.text)  # the reported text is the JSON that was decoded
    else:
        assert extraction.found == (extraction.error is not None)
    assert len(repair_json(text)) == len(text)


# --- round-trips --------------------------------------------------------------------------

CONTENT_LINE = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"),
    max_size=40,
)
DECORATIONS = st.sampled_from(["{h}", "**{h}**", "## {h}", "## {n}", "**{n}**", "  {h}  "])


@SETTINGS
@given(
    sections=st.dictionaries(HEADER_NAMES, st.lists(CONTENT_LINE, max_size=5), min_size=1),
    decorations=st.lists(DECORATIONS, min_size=1),
    preamble=st.lists(CONTENT_LINE, max_size=3),
    crlf=st.booleans(),
)
def test_rendered_sections_parse_back_to_the_same_content(
    sections: dict[str, list[str]], decorations: list[str], preamble: list[str], crlf: bool
) -> None:
    names = list(sections)
    # Content lines that do not contain any section name cannot be taken for a header.
    for line in [*preamble, *(line for lines in sections.values() for line in lines)]:
        assume(not any(name in line for name in names))
    parts = list(preamble)
    for index, (name, lines) in enumerate(sections.items()):
        decoration = decorations[index % len(decorations)]
        parts.append(decoration.format(h=f"[{name}]", n=name))
        parts.extend(lines)
    text = ("\r\n" if crlf else "\n").join(parts)
    result = multi_section_parser(text, [f"[{name}]" for name in names])
    assert result.ok, result.feedback
    assert result.sections == {
        f"[{name}]": "\n".join(lines).strip() for name, lines in sections.items()
    }


@SETTINGS
@given(
    body=st.lists(CONTENT_LINE, max_size=5),
    before=st.lists(CONTENT_LINE, max_size=3),
    after=st.lists(CONTENT_LINE, max_size=3),
    width=st.integers(min_value=5, max_value=30),
)
def test_content_between_dividers_parses_back(
    body: list[str], before: list[str], after: list[str], width: int
) -> None:
    assume("\n".join(body).strip())
    for line in [*body, *after]:
        assume("=====" not in line)
    divider = "=" * width
    text = "\n".join([*before, divider, *body, divider, *after])
    assert multi_section_parser(text).data == "\n".join(body).strip()


LINES = st.builds(
    Line,
    sku=st.text(max_size=20),
    quantity=st.integers(min_value=-(10**6), max_value=10**6),
    price=st.floats(allow_nan=False, allow_infinity=False, width=64),
)
INVOICES = st.builds(
    Invoice,
    number=st.integers(min_value=0, max_value=10**9),
    customer=st.text(max_size=30),
    lines=st.lists(LINES, max_size=4),
    paid=st.booleans(),
    notes=st.none() | st.text(max_size=30),
)
PROSE = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="{}[]`"),
    max_size=60,
)
WRAPPERS = st.sampled_from(
    [
        "{json}",
        "{prose}\n{json}",
        "{prose} {json} {prose}",
        "{prose}\n```json\n{json}\n```\n{prose}",
        "```\n{json}\n```",
        '{prose}\n```json\n{{"draft": true}}\n```\nFinal:\n```json\n{json}\n```',
        "{json}\n{prose} [1]",
    ]
)


@SETTINGS
@given(
    invoice=INVOICES,
    wrapper=WRAPPERS,
    prose=PROSE,
    indent=st.sampled_from([None, 2]),
)
def test_a_dumped_model_wrapped_in_prose_or_fences_parses_back(
    invoice: Invoice, wrapper: str, prose: str, indent: int | None
) -> None:
    text = wrapper.format(json=invoice.model_dump_json(indent=indent), prose=prose)
    result = PARSER(text)
    assert result.ok, result.feedback
    assert result.data == invoice


FINITE_JSON_VALUES = json_values(max_leaves=20)


@SETTINGS
@given(value=FINITE_JSON_VALUES, trailing=st.booleans())
def test_any_json_value_is_extracted_from_its_dump(value: Any, trailing: bool) -> None:
    text = json.dumps(value, indent=2 if trailing else None)
    if trailing and isinstance(value, dict | list) and value:
        text = text[:-1].rstrip() + ",\n" + text[-1]  # a trailing comma to repair
    extraction = extract_json(text)
    assert extraction.ok
    assert extraction.value == value


@SETTINGS
@given(value=st.dictionaries(st.sampled_from(["number", "customer", "lines", "paid", "x"]),
                             FINITE_JSON_VALUES, max_size=5))  # fmt: skip
def test_a_bare_json_reply_gets_the_same_verdict_as_the_same_json_in_prose(
    value: dict[str, Any],
) -> None:
    # A bare object takes json_parser's one-pass fast path; wrapped in prose it goes through
    # the candidate search. Both must reach the same verdict and feedback.
    text = json.dumps(value)
    bare, in_prose = PARSER(text), PARSER(f"Here is the invoice: {text} Thanks.")
    assert bare.ok == in_prose.ok
    assert bare.feedback == in_prose.feedback
    if bare.ok:
        assert bare.data == in_prose.data
