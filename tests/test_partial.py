"""The partial output read from a streamed reply (observe/_partial.py), event by event."""

from __future__ import annotations

import itertools
import math
from typing import Any, Literal

import pytest
from pydantic import BaseModel, TypeAdapter

from subagent import (
    CallRetried,
    ErrorKind,
    PartialOutput,
    RunEnded,
    TextDelta,
    TransportRetry,
    TurnEnded,
    TurnStarted,
)
from subagent.observe._partial import (
    PARSE_EVERY,
    PARSE_GROWTH,
    PRUNED_LEVELS,
    PartialOutputReader,
    partial_output_reader,
)
from subagent.parsers import build_contract, json_parser
from subagent.records import Turn, TurnOutcome, TurnType
from subagent.records._runs import build_step


class Report(BaseModel):
    title: str
    body: str = ""
    pages: int = 0


class Item(BaseModel):
    name: str


def reader_for(output: Any, protocol: str = "native", **kwargs: Any) -> PartialOutputReader[Any]:
    return partial_output_reader("a", build_contract(output, None, **kwargs), protocol)


def turn(index: int) -> TurnStarted:
    return TurnStarted("a", index, TurnType.NORMAL, "normal", 3, 1, 0, 1, 0)


def feed(reader: PartialOutputReader[Any], text: str, index: int = 1, size: int = 4) -> list[Any]:
    """The outputs read while ``text`` arrives in pieces of ``size`` characters."""
    read = [reader.read(TextDelta("a", index, text[at : at + size]))
            for at in range(0, len(text), size)]  # fmt: skip
    return [partial.output for partial in read if partial is not None]


def ended(reader: PartialOutputReader[Any], index: int = 1) -> Any:
    """What the reader reads when turn ``index`` ends without an answer (its whole reply)."""
    turn = Turn(index=index, type=TurnType.NORMAL, outcome=TurnOutcome.ERROR, phase_after="retry")
    partial = reader.read(TurnEnded("a", turn))
    return None if partial is None else partial.output


def whole(reader: PartialOutputReader[Any], text: str, index: int = 1) -> list[Any]:
    """The outputs read while ``text`` arrives, its turn ended: the last is the whole reply's."""
    outputs = feed(reader, text, index)
    last = ended(reader, index)
    return outputs if last is None else [*outputs, last]


class CountingAdapter:
    """A TypeAdapter that keeps the length of every text it was asked to validate."""

    def __init__(self, output_type: Any):
        self._adapter: TypeAdapter[Any] = TypeAdapter(output_type)
        self.parsed: list[int] = []

    def validate_json(self, text: str, **kwargs: Any) -> Any:
        self.parsed.append(len(text))
        return self._adapter.validate_json(text, **kwargs)


def test_a_growing_reply_yields_the_output_as_far_as_it_validates() -> None:
    reader = reader_for(Report)
    body = "the quarterly numbers are in and they look better than last time " * 3
    outputs = whole(reader, f'{{"title": "Q3", "body": "{body}", "pages": 12}}')
    assert outputs, "nothing was read before the reply ended"
    assert all(isinstance(output, Report) and output.title == "Q3" for output in outputs)
    bodies = [output.body for output in outputs]
    assert all(body.startswith(seen) for seen in bodies)  # the string as far as it came
    assert bodies == sorted(bodies, key=len)
    assert all(before != after for before, after in itertools.pairwise(outputs))
    assert outputs[-1] == Report(title="Q3", body=body, pages=12)


def test_prose_and_a_fence_before_the_json_are_skipped() -> None:
    reader = reader_for(Report)
    text = 'Here is the report:\n```json\n{"title": "Quarterly report", "pages": 3}\n```'
    assert whole(reader, text)[-1] == Report(title="Quarterly report", pages=3)


def test_a_partial_missing_a_required_field_is_not_yielded() -> None:
    reader = reader_for(Report)
    # "title" is required: until its value begins nothing validates.
    assert feed(reader, '{"body": "' + "x" * 100 + '"') == []
    assert whole(reader, ', "title": "Late"}') == [Report(title="Late", body="x" * 100)]


def test_a_list_output_grows_item_by_item() -> None:
    reader = reader_for(list[Item])
    names = [f"item number {n}" for n in range(12)]
    text = "[" + ", ".join(f'{{"name": "{name}"}}' for name in names) + "]"
    outputs = whole(reader, text)
    assert outputs[-1] == [Item(name=name) for name in names]
    lengths = [len(output) for output in outputs]
    assert lengths == sorted(lengths) and lengths[0] < len(names)


class Plan(BaseModel):
    goal: str
    tasks: list[Task] = []
    status: Literal["draft", "final"] = "draft"


class Task(BaseModel):
    name: str
    days: int


def test_the_half_written_last_model_of_a_list_inside_a_model_is_left_out() -> None:
    reader = reader_for(Plan)
    tasks = [Task(name=f"task number {n} of the plan", days=n + 1) for n in range(6)]
    listed = ", ".join(task.model_dump_json() for task in tasks)
    outputs = whole(reader, f'{{"goal": "ship it", "tasks": [{listed}]}}')
    counts = [len(output.tasks) for output in outputs]
    assert counts == sorted(counts) and len(set(counts)) >= 4  # item after item
    assert all(output.tasks == tasks[: len(output.tasks)] for output in outputs)  # no half one
    assert outputs[-1] == Plan(goal="ship it", tasks=tasks)


def test_a_last_value_that_does_not_validate_yet_is_left_out() -> None:
    reader = reader_for(Plan)
    outputs = feed(reader, '{"goal": "a goal long enough to be parsed", "status": "fin', size=64)
    assert outputs == [Plan(goal="a goal long enough to be parsed")]  # "fin" is no status yet


def test_an_invalid_element_before_the_last_one_keeps_its_whole_list_out() -> None:
    reader = reader_for(Plan)
    text = '{"goal": "g", "tasks": [{"name": "a", "days": "many"}, {"name": "b", "days": 2}]}'
    assert whole(reader, text) == [Plan(goal="g")]  # never a list with "b" but without "a"


def test_a_new_turn_starts_over_with_its_own_index() -> None:
    reader = reader_for(Report)
    first = feed(reader, '{"title": "first attempt, which will be found invalid", "pages": "x"', 1)
    reader.read(turn(2))
    read = [reader.read(TextDelta("a", 2, piece))
            for piece in ['{"title": "second', ' attempt, the one that is valid"}']]  # fmt: skip
    partials = [partial for partial in read if partial is not None]
    assert first and first[-1].title.startswith("first attempt")
    assert [(p.index, p.output.title) for p in partials] == [
        (2, "second attempt, the one that is valid")
    ]


def test_a_retried_call_drops_what_its_failed_attempt_streamed() -> None:
    reader = reader_for(Report)
    assert feed(reader, '{"title": "from the attempt that failed midway')
    retry = TransportRetry(attempt=1, kind=ErrorKind.CONNECTION, message="reset", delay_s=0.0)
    reader.read(CallRetried("a", 1, retry))
    outputs = whole(reader, '{"title": "from the attempt sent again", "pages": 2}')
    assert outputs[-1] == Report(title="from the attempt sent again", pages=2)
    assert all("from the attempt sent again".startswith(output.title) for output in outputs)


def test_the_explicit_fail_is_not_read_as_an_answer() -> None:
    class Settings(BaseModel):  # every field has a default: {"fail": ...} would validate
        verbose: bool = False

    reader = reader_for(Settings)
    assert feed(reader, '{"fail": "the task cannot be done without the missing file"}') == []


def test_a_fail_field_of_the_output_type_is_read() -> None:
    class Verdict(BaseModel):
        fail: str

    reader = reader_for(Verdict)
    assert whole(reader, '{"fail": "three of the twelve checks did not pass"}')[-1] == Verdict(
        fail="three of the twelve checks did not pass"
    )


def test_a_react_reply_is_read_from_its_final_answer_only() -> None:
    reader = reader_for(Report, protocol="react")
    thought = 'Thought: the tool said {"title": "not this one", "pages": 99} earlier.\n'
    assert feed(reader, thought) == []
    outputs = whole(reader, 'Final Answer: {"title": "this one", "pages": 1}')
    assert outputs[-1] == Report(title="this one", pages=1)
    assert all(output.title != "not this one" for output in outputs)


def test_a_scalar_output_gets_no_partial_output() -> None:
    reader = reader_for(int)
    assert feed(reader, "12345678901234567890123456789012345678901234567890") == []


def test_a_json_parser_output_is_read_by_its_type() -> None:
    reader = reader_for(json_parser(Report))
    assert whole(reader, '{"title": "from a json_parser", "pages": 4}')[-1] == Report(
        title="from a json_parser", pages=4
    )


@pytest.mark.parametrize("output", [str, None])
def test_a_text_output_is_refused_naming_what_to_do_instead(output: Any) -> None:
    with pytest.raises(TypeError, match="TextDelta"):
        reader_for(output)


def test_a_reply_past_max_reply_chars_is_not_parsed_any_more() -> None:
    adapter = CountingAdapter(Report)
    reader = PartialOutputReader("a", adapter, "{", max_chars=200)  # type: ignore[arg-type]
    feed(reader, '{"title": "' + "t" * 1000 + '"}')
    assert adapter.parsed and max(adapter.parsed) <= 200


def test_parsing_a_long_reply_reads_linear_work_in_all() -> None:
    adapter = CountingAdapter(Report)
    reader = PartialOutputReader("a", adapter, "{")  # type: ignore[arg-type]
    text = '{"title": "long", "body": "' + "lorem ipsum " * 20_000 + '"}'
    n = len(text)
    feed(reader, text, size=3)  # a piece per token, about
    # Parsing on every piece would read about n * n / 6 characters, 9.6e9 here.
    assert sum(adapter.parsed) <= (PARSE_GROWTH + 1) * n + PARSE_EVERY * PARSE_GROWTH**2
    first = PARSE_EVERY * PARSE_GROWTH
    assert len(adapter.parsed) <= first // PARSE_EVERY + 1 + math.log(n / first) / math.log(
        1 + 1 / PARSE_GROWTH
    )


def test_parses_that_leave_out_unfinished_elements_stay_within_their_bound() -> None:
    adapter = CountingAdapter(Plan)
    reader = PartialOutputReader("a", adapter, "{")  # type: ignore[arg-type]
    listed = ", ".join(f'{{"name": "task {n}", "days": {n}}}' for n in range(3000))
    text = f'{{"goal": "many tasks", "tasks": [{listed}]}}'
    n = len(text)
    outputs = whole(reader, text)
    assert len(outputs[-1].tasks) == 3000
    validations_per_parse = 1 + PRUNED_LEVELS
    bound = (PARSE_GROWTH + 1) * n + PARSE_EVERY * PARSE_GROWTH**2
    assert sum(adapter.parsed) <= validations_per_parse * bound


def test_the_final_output_is_the_runs_own() -> None:
    reader = reader_for(Report)
    feed(reader, '{"title": "draft", "pages": 1}')
    step = build_step(agent="a", output=Report(title="checked", pages=1), failure=None,
                      turns=[], max_turns=1, return_retries=0, duration_s=0.0)  # fmt: skip
    assert reader.read(RunEnded("a", step)) == PartialOutput(
        "a", 1, Report(title="checked", pages=1), final=True
    )
