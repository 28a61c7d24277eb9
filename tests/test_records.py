"""Step and Turn records: JSON round trip, failure reasons, summaries."""

from __future__ import annotations

import json
import math
import pickle
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict
from support import ROOT

import subagent
from subagent import (
    ConfigurationError,
    ErrorKind,
    FailReason,
    Failure,
    LLMError,
    LLMResponse,
    MissingVariableError,
    ParserContractError,
    ParseResult,
    ReplyPolicy,
    RetryPolicy,
    RunFailedError,
    ScriptedLLM,
    ScriptExhaustedError,
    Step,
    StopReason,
    SubAgent,
    TemplateError,
    ToolCall,
    TurnType,
)
from subagent.parsers import json_parser
from subagent.records._runs import step_model
from subagent.testing import ScriptedReply
from subagent.tools import NestedRunError


class Answer(BaseModel):
    value: int


def add(a: int, b: int) -> int:
    """Add."""
    return a + b


def a_run() -> Step[Answer]:
    agent = SubAgent(name="calc", prompt="p", output=Answer, tools=[add])
    llm = ScriptedLLM([
        LLMResponse(tool_calls=[ToolCall(name="add", arguments={"a": 1, "b": 2})]),
        '{"value": "three"}',
        '{"value": 3}',
    ])  # fmt: skip
    return agent.run_sync(llm=llm, max_turns=2, return_retries=1)


def a_nested_run() -> Step[Answer]:
    child = SubAgent(name="adder", prompt="Add {{a}} and {{b}}", output=Answer, max_turns=1,
                     llm=ScriptedLLM(['{"value": 3}']))  # fmt: skip
    parent = SubAgent(name="boss", prompt="Solve", output=Answer, tools=[child.as_tool()])
    llm = ScriptedLLM([
        LLMResponse(tool_calls=[ToolCall(name="adder", arguments={"a": "1", "b": "2"})]),
        '{"value": 3}',
    ])  # fmt: skip
    return parent.run_sync(llm=llm, max_turns=2)


def a_failed_run() -> Step[Answer]:
    agent = SubAgent(name="calc", prompt="p", output=Answer)
    return agent.run_sync(llm=ScriptedLLM(['{"value": "three"}']), max_turns=1)


@pytest.mark.parametrize("make", [a_run, a_nested_run, a_failed_run])
def test_the_steps_of_runs_pickle_as_they_are(make: Any) -> None:
    # Steps cross process boundaries (multiprocessing, Ray tasks); a run's Step is a
    # Step[Any], a parametrized class pickle cannot find by name.
    step = make()
    restored = pickle.loads(pickle.dumps(step))
    assert restored == step and type(restored) is type(step)
    assert restored.usage == step.usage and restored.ok == step.ok


def test_a_typed_step_and_the_error_carrying_it_pickle_with_their_output_type() -> None:
    typed = Step[Answer].model_validate_json(a_failed_run().model_dump_json())
    restored = pickle.loads(pickle.dumps(typed))
    assert type(restored) is Step[Answer] and restored == typed
    error = pickle.loads(pickle.dumps(RunFailedError(typed)))
    assert isinstance(error, RunFailedError) and error.step == typed


def errors_to_pickle() -> list[Exception]:
    failed = a_failed_run()
    nested = NestedRunError("the inner agent failed", failed)
    nested.turns = tuple(failed.turns)  # as on every error raised out of a run
    return [
        ConfigurationError("max_turns", "must be an int >= 1, got 0"),
        TemplateError("unclosed tag", "prompt"),
        MissingVariableError("question", "prompt"),
        LLMError(
            ErrorKind.RATE_LIMIT,
            "slow down",
            status_code=429,
            retry_after=2.0,
            body="{}",
            usage=(3, 4),
        ),
        RunFailedError(failed),
        subagent.ThinkError(failed),
        nested,
        ScriptExhaustedError("the script has 1 reply"),
        ParserContractError("the parser raised ValueError"),
    ]


@pytest.mark.parametrize("error", errors_to_pickle(), ids=lambda e: type(e).__name__)
def test_every_error_pickles_with_its_message_and_attributes(error: Exception) -> None:
    restored = pickle.loads(pickle.dumps(error))
    assert type(restored) is type(error)
    assert str(restored) == str(error) and restored.args == error.args
    assert vars(restored) == vars(error)


def test_step_round_trips_through_json_typed() -> None:
    step = a_run()
    restored = Step[Answer].model_validate_json(step.model_dump_json())
    assert restored == step
    assert isinstance(restored.output, Answer)
    assert restored.turns[0].tool_calls[0].arguments == {"a": 1, "b": 2}
    assert restored.usage.by_type.keys() == {TurnType.NORMAL, TurnType.MUST_RETURN, TurnType.RETRY}


@pytest.mark.parametrize(
    ("output", "value", "reads"),
    [(None, "hi", str), (str, "hi", str), (Answer, Answer(value=1), Answer),
     (list[Answer], [Answer(value=1)], list), (Answer | int, Answer(value=1), Answer)],
    ids=str,
)  # fmt: skip
def test_the_step_model_of_an_output_reads_a_step_back_typed(
    output: Any, value: Any, reads: type
) -> None:
    # What Ray workers and DBOS checkpoints hand back as JSON comes back typed.
    step = Step[Any](agent="a", output=value, max_turns=1, return_retries=0)
    restored = step_model(output).model_validate_json(step.model_dump_json())
    assert isinstance(restored.output, reads) and restored.output == value


def test_the_step_model_of_a_parser_reads_its_value_back_as_json_data() -> None:
    step = Step[Any](agent="a", output=Answer(value=1), max_turns=1, return_retries=0)
    restored = step_model(json_parser(Answer)).model_validate_json(step.model_dump_json())
    assert restored.output == {"value": 1}


@pytest.mark.parametrize("reader", [Step, Step[Answer], Step[Any]], ids=str)
def test_a_step_with_nested_steps_reads_back_equal_from_json(reader: type[Step[Any]]) -> None:
    step = a_nested_run()
    restored = reader.model_validate_json(step.model_dump_json())
    assert restored == step and step == restored
    # Equal as records: the child's output comes back as its JSON data, not its type.
    child = restored.turns[0].tool_results[0].step
    assert child is not None and child.output == {"value": 3}
    assert restored.turns[0] == step.turns[0]


def test_steps_that_record_different_runs_are_not_equal() -> None:
    step = a_nested_run()
    text = step.model_dump_json()
    other = Step.model_validate_json(text.replace('"value":3', '"value":4', 1))
    assert other != step and step != other
    assert step != a_run() and step != "step" and step != step.model_dump(mode="json")


def test_a_step_whose_output_has_no_json_form_equals_only_an_equal_step() -> None:
    first = Step[Any](agent="a", max_turns=1, return_retries=0, output={1, object()})
    assert first == first.model_copy()
    assert first != Step[Any](agent="a", max_turns=1, return_retries=0, output={2, object()})


def test_json_carries_ok_and_the_failure_reason_as_strings() -> None:
    agent = SubAgent(name="a", prompt="p", output=Answer, reply_policy=ReplyPolicy(allow_fail=True))
    step = agent.run_sync(llm=ScriptedLLM(['{"fail": "no data"}']))
    data = step.model_dump(mode="json")
    assert data["ok"] is False
    assert data["failure"] == {"reason": "explicit_fail", "message": "no data", "error_kind": None}
    assert Step[Answer].model_validate(data).failure == step.failure


def test_fail_reason_compares_equal_to_its_string() -> None:
    assert FailReason.BUDGET_EXHAUSTED == "budget_exhausted"
    assert {reason.value for reason in FailReason} == {
        "budget_exhausted", "explicit_fail", "llm_error", "timeout", "cancelled", "error",
        "worker_lost", "usage_limit", "tool_server_lost", "input_refused",
    }  # fmt: skip


def test_a_stored_input_refused_failure_loads_back_and_is_not_retryable() -> None:
    text = (
        '{"agent": "a", "max_turns": 2, "return_retries": 0, "turns": [], "failure": '
        '{"reason": "input_refused", "message": "no homework here"}}'
    )
    step = Step[Answer].model_validate_json(text)
    assert step.failure == Failure(reason=FailReason.INPUT_REFUSED, message="no homework here")
    assert not step.retryable and not step.ok
    assert Step[Answer].model_validate_json(step.model_dump_json()) == step


def test_raise_for_failure_returns_a_successful_step() -> None:
    step = a_run()
    assert step.raise_for_failure() is step


def test_raise_for_failure_raises_with_the_step() -> None:
    agent = SubAgent(name="a", prompt="p", output=Answer)
    step = agent.run_sync(llm=ScriptedLLM(["nope"]), max_turns=1)
    with pytest.raises(RunFailedError, match=r"run failed \(budget_exhausted\)") as caught:
        step.raise_for_failure()
    assert caught.value.step is step and caught.value.reason is FailReason.BUDGET_EXHAUSTED


def test_output_or_raise_returns_the_output_of_a_successful_step() -> None:
    step = a_run()
    assert step.output is not None
    assert step.output_or_raise() is step.output


def test_output_or_raise_raises_with_the_step_when_the_run_failed() -> None:
    agent = SubAgent(name="a", prompt="p", output=Answer)
    step = agent.run_sync(llm=ScriptedLLM(["nope"]), max_turns=1)
    with pytest.raises(RunFailedError, match=r"run failed \(budget_exhausted\)") as caught:
        step.output_or_raise()
    assert caught.value.step is step


def test_summary_names_outcome_and_turn_types() -> None:
    assert a_run().summary() == "done in 3 turns (normal, must_return, retry)"


def test_summary_says_turn_for_a_single_turn() -> None:
    agent = SubAgent(name="a", prompt="p", output=Answer)
    step = agent.run_sync(llm=ScriptedLLM(['{"value": 1}']), max_turns=1)
    assert step.summary() == "done in 1 turn (must_return)"


# --- every Step can be stored and loaded back ---------------------------------------------


class Reading(BaseModel):
    value: float
    history: list[float] = []


class FaithfulReading(BaseModel):
    """A model that stores NaN and infinities as JSON constants keeps them."""

    model_config = ConfigDict(ser_json_inf_nan="constants")

    value: float


@pytest.mark.parametrize(
    ("reply", "location"),
    [
        ('{"value": NaN}', "value"),
        ('{"value": Infinity}', "value"),
        ('{"value": -Infinity}', "value"),
        ('{"value": 1e999}', "value"),
        ('{"value": "nan"}', "value"),  # pydantic's lax mode turns the string into a float
        ('{"value": 1, "history": [2, NaN]}', "history.1"),
    ],
)
def test_non_finite_numbers_in_an_output_get_feedback(reply: str, location: str) -> None:
    agent = SubAgent(name="meter", prompt="p", output=Reading, max_turns=1, return_retries=1)
    llm = ScriptedLLM([reply, '{"value": 2.5}'])
    step = agent.run_sync(llm=llm)
    assert step.ok and step.output == Reading(value=2.5)
    first = step.turns[0]
    assert first.error_type == "invalid_output"
    assert first.error is not None and f"NaN or an infinity at {location}" in first.error
    assert f"at {location}" in llm.requests[1].messages[-1].content  # the model was told
    assert Step[Reading].model_validate_json(step.model_dump_json()) == step


def test_non_finite_numbers_from_a_parser_get_feedback_too() -> None:
    def parse(text: str) -> ParseResult:
        return ParseResult.success({"ratio": float(text)})

    agent = SubAgent(name="ratio", prompt="p", output=parse, max_turns=1, return_retries=1)
    step = agent.run_sync(llm=ScriptedLLM(["inf", "0.5"]))
    assert step.output == {"ratio": 0.5}
    assert step.turns[0].error is not None and "at ratio" in step.turns[0].error


def test_a_model_that_stores_non_finite_numbers_keeps_them() -> None:
    agent = SubAgent(name="meter", prompt="p", output=FaithfulReading, max_turns=1)
    step = agent.run_sync(llm=ScriptedLLM(['{"value": NaN}']))
    assert step.ok and step.output is not None and math.isnan(step.output.value)
    restored = Step[FaithfulReading].model_validate_json(step.model_dump_json())
    assert restored.output is not None and math.isnan(restored.output.value)


def test_lone_surrogates_in_a_reply_are_stored_as_replacement_characters() -> None:
    reply = json.loads('"left \\ud800 right \\udc00"')  # what a JSON escape decodes to
    step = SubAgent(name="echo", prompt="p", max_turns=1).run_sync(llm=ScriptedLLM([reply]))
    assert step.output == "left \ufffd right \ufffd"
    assert step.turns[0].reply == "left \ufffd right \ufffd"
    assert Step[str].model_validate_json(step.model_dump_json()) == step


def test_lone_surrogates_in_errors_and_tool_calls_are_replaced() -> None:
    bad = "\ud800"
    error = LLMError(ErrorKind.BAD_REQUEST, f"no {bad}", body=f'{{"error": "{bad}"}}')
    assert error.message == "no \ufffd" and error.body == '{"error": "\ufffd"}'
    assert str(error) == "bad_request: no \ufffd"
    call = ToolCall(name=f"t{bad}", arguments={f"k{bad}": [f"v{bad}"]}, id=bad)
    assert call.name == "t\ufffd" and call.id == "\ufffd"
    assert call.arguments == {"k\ufffd": ["v\ufffd"]}
    step = SubAgent(name="a", prompt="p").run_sync(llm=ScriptedLLM([error]))
    assert step.failure is not None and "\ufffd" in step.failure.message
    assert Step[str].model_validate_json(step.model_dump_json()) == step


def test_tool_arguments_with_non_finite_numbers_are_kept_as_their_json_text() -> None:
    call = ToolCall(name="add", arguments={"a": float("nan"), "b": [float("inf")]})
    assert call.arguments == '{"a": NaN, "b": [Infinity]}'
    step = a_run_with(LLMResponse(tool_calls=[call]))
    assert step.turns[0].tool_results[0].error_type == "invalid_arguments"
    assert Step[Answer].model_validate_json(step.model_dump_json()) == step


def a_run_with(*replies: ScriptedReply) -> Step[Answer]:
    agent = SubAgent(name="calc", prompt="p", output=Answer, tools=[add])
    return agent.run_sync(llm=ScriptedLLM([*replies, '{"value": 3}']), max_turns=2)


# Replies drawn from text and JSON-ish strategies: unicode with lone surrogates, JSON with
# NaN/Infinity literals, huge exponents, unicode escapes, explicit fails, tool calls with odd
# arguments, cut-off replies and LLM errors.
SURROGATE_TEXT = st.lists(
    st.one_of(st.characters(), st.characters(categories=["Cs"])), max_size=30
).map("".join)
NUMBERS = st.one_of(
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", "-1e999"]),
)
JSON_SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, SURROGATE_TEXT)
JSONISH = st.recursive(
    JSON_SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(SURROGATE_TEXT, inner, max_size=3)
    ),
    max_leaves=8,
)


def _json_text(value: object) -> str:
    """JSON text with the literals Python's encoder writes for NaN/Infinity."""
    if isinstance(value, str) and value in {"NaN", "Infinity", "-Infinity", "1e999", "-1e999"}:
        return value
    if isinstance(value, list):
        return "[" + ", ".join(_json_text(item) for item in value) + "]"
    if isinstance(value, dict):
        items = (f"{json.dumps(key)}: {_json_text(item)}" for key, item in value.items())
        return "{" + ", ".join(items) + "}"
    return json.dumps(value)


READING_REPLIES = st.builds(
    lambda value, history, prose: prose + _json_text({"value": value, "history": history}),
    NUMBERS,
    st.lists(NUMBERS, max_size=3),
    st.sampled_from(["", "Here you go:\n", "```json\n"]),
)
REPLIES: st.SearchStrategy[ScriptedReply] = st.one_of(
    SURROGATE_TEXT,
    READING_REPLIES,
    JSONISH.map(_json_text),
    SURROGATE_TEXT.map(lambda reason: json.dumps({"fail": reason})),
    st.builds(
        lambda name, arguments: LLMResponse(tool_calls=[ToolCall(name=name, arguments=arguments)]),
        st.sampled_from(["note", "missing"]),
        st.one_of(st.dictionaries(st.just("text"), JSONISH, max_size=1), SURROGATE_TEXT),
    ),
    st.builds(
        lambda text, reason: LLMResponse(text=text, stop_reason=reason),
        SURROGATE_TEXT,
        st.sampled_from(list(StopReason)),
    ),
    st.builds(
        lambda message: LLMError(ErrorKind.BAD_REQUEST, message, body=message),
        SURROGATE_TEXT,
    ),
)


def note(text: str) -> str:
    """Write a note."""
    return f"noted: {text}"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    output=st.sampled_from([None, Reading]),
    replies=st.lists(REPLIES, min_size=4, max_size=4),
    max_turns=st.integers(1, 3),
    return_retries=st.integers(0, 1),
)
def test_any_scripted_conversation_yields_a_step_that_round_trips(
    output: type[Reading] | None,
    replies: list[ScriptedReply],
    max_turns: int,
    return_retries: int,
) -> None:
    agent: SubAgent[Any] = SubAgent(
        name="prop", prompt="p", output=output, tools=[note], max_turns=max_turns,
        return_retries=return_retries, retry_policy=RetryPolicy.none(),
    )  # fmt: skip
    step = agent.run_sync(llm=ScriptedLLM(replies))
    text = step.model_dump_json()
    restored = (Step[Reading] if output is Reading else Step[str]).model_validate_json(text)
    assert restored == step
    assert restored.model_dump_json() == text


# --- whole-run retry decisions -------------------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "kind", "retryable"),
    [
        (FailReason.LLM_ERROR, ErrorKind.RATE_LIMIT, True),
        (FailReason.LLM_ERROR, ErrorKind.SERVER_ERROR, True),
        (FailReason.LLM_ERROR, ErrorKind.CONNECTION, True),
        (FailReason.LLM_ERROR, ErrorKind.INVALID_RESPONSE, True),
        (FailReason.LLM_ERROR, ErrorKind.CONTEXT_LENGTH, False),
        (FailReason.LLM_ERROR, ErrorKind.AUTHENTICATION, False),
        (FailReason.LLM_ERROR, ErrorKind.PERMISSION, False),
        (FailReason.LLM_ERROR, ErrorKind.BAD_REQUEST, False),
        (FailReason.LLM_ERROR, ErrorKind.CONTENT_FILTER, False),
        (FailReason.LLM_ERROR, ErrorKind.RESPONSE_TOO_LARGE, False),
        (FailReason.LLM_ERROR, ErrorKind.OTHER, False),
        (FailReason.TIMEOUT, ErrorKind.TIMEOUT, False),
        (FailReason.BUDGET_EXHAUSTED, None, False),
        (FailReason.EXPLICIT_FAIL, None, False),
        (FailReason.CANCELLED, None, False),
        (FailReason.ERROR, None, False),
        (FailReason.WORKER_LOST, None, True),
    ],
)
def test_a_step_says_whether_running_it_again_could_help(
    reason: FailReason, kind: ErrorKind | None, retryable: bool
) -> None:
    step = Step[Any](agent="a", failure=Failure(reason=reason, message="m", error_kind=kind),
                     max_turns=1, return_retries=0)  # fmt: skip
    assert step.retryable is retryable
    assert json.loads(step.model_dump_json())["retryable"] is retryable
    assert Step[Any].model_validate_json(step.model_dump_json()).retryable is retryable


def test_a_successful_step_is_not_retryable() -> None:
    assert Step[Any](agent="a", output=1, max_turns=1, return_retries=0).retryable is False


def test_every_error_kind_has_a_documented_retry_decision() -> None:
    table = (ROOT / "docs" / "scale.md").read_text(encoding="utf-8")
    for kind in ErrorKind:
        assert f"| `llm_error` of kind `{kind.value}` |" in table, kind


# --- records the loop builds without validation ----------------------------------------------


def test_records_the_loop_builds_are_whole_and_equal_to_validated_ones() -> None:
    tools = [LLMResponse(tool_calls=[ToolCall(name="look", arguments={"q": "x"})])]
    llm = ScriptedLLM([*tools, "not json", '{"value": 1}'])

    def look(q: str) -> str:
        return q

    agent = SubAgent(name="a", prompt="p", output=Answer, tools=[look])
    step = agent.run_sync(llm=llm, max_turns=2, return_retries=1)
    assert step.ok and len(step.turns) == 3
    records: list[Any] = [step, *step.turns, *llm.requests]
    records += [m for r in llm.requests for m in r.messages]
    for record in records:
        cls = type(record)
        assert set(cls.model_fields) <= set(record.__dict__), cls
        rebuilt = cls.model_validate(record.model_dump())
        assert rebuilt.model_dump() == record.model_dump(), cls
        assert rebuilt.model_fields_set <= record.model_fields_set | set(cls.model_fields)
