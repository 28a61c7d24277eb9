"""The BFCL harness (eval/bfcl_*.py, eval/run_bfcl.py): sampling, grading, systems, resume.

No model runs here: the systems talk to a scripted OpenAI-compatible server on 127.0.0.1,
and grading is BFCL's own checker from the installed ``bfcl-eval`` package.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from bfcl_data import DEFAULT_CATEGORIES, SAMPLE_SIZE, grade, load_cases, openai_tools, tool_name
from bfcl_report import (
    PAGE,
    chosen_records,
    head_to_head,
    render_head_to_head,
    rows_from,
    section,
    update_page,
    wilson,
)
from bfcl_systems import (
    Server,
    calls_in_text,
    chosen_calls,
    oracle_feedback,
    run_raw,
    run_subagent_contract,
    run_subagent_tools,
    run_subagent_tools_text,
    system_named,
)
from openai_server import Reply, completion, running_server
from run_bfcl import pending, read_lines, record_path, run_cases

from subagent import OpenAIChat

pytestmark = pytest.mark.anyio


def right_calls(case: Any) -> list[dict[str, Any]]:
    """The first allowed value of every argument of the ground truth, as calls."""
    calls = []
    for answer in case.answer:
        ((name, arguments),) = answer.items()
        chosen = {key: values[0] for key, values in arguments.items() if values[0] != ""}
        calls.append({"name": tool_name(name), "arguments": chosen})
    return calls


def an_int_argument() -> tuple[Any, dict[str, Any], str]:
    """The first simple_python case whose right call has an int argument: case, call, key."""
    return next(
        (case, call, key)
        for case in load_cases("simple_python")
        for call in right_calls(case)[:1]
        for key, value in call["arguments"].items()
        if type(value) is int
    )


def recorded(system: str, case: Any, calls: list[dict[str, Any]], **outcome: Any) -> dict[str, Any]:
    """A record of ``case`` as the runner writes it: ``calls`` made in one LLM call, the
    outcome's other fields given by ``outcome``."""
    return {
        "system": system,
        "setup": "template",
        "category": case.category,
        "id": case.id,
        "digest": case.digest,
        "outcome": {
            "calls": calls,
            "first_calls": None,
            "text": "",
            "llm_calls": 1,
            "prompt_tokens": 1,
            "completion_tokens": 1,
            "turns": [],
            "error": None,
            **outcome,
        },
    }


def test_every_default_category_has_a_fixed_sample_of_fifty_cases() -> None:
    for category in DEFAULT_CATEGORIES:
        sample = load_cases(category)
        assert len(sample) == SAMPLE_SIZE
        assert len({case.id for case in sample}) == SAMPLE_SIZE
        assert [case.id for case in load_cases(category)] == [case.id for case in sample]
        whole = load_cases(category, None)
        assert len(whole) > SAMPLE_SIZE
        # the sample is spread over the category, not its first lines
        numbers = [int(case.id.rsplit("_", 1)[1]) for case in sample]
        assert max(numbers) > len(whole) // 2 and min(numbers) < len(whole) // 2


def test_a_small_category_is_taken_whole() -> None:
    cases = load_cases("live_relevance")
    assert len(cases) == len(load_cases("live_relevance", None)) < SAMPLE_SIZE


def test_an_unknown_or_multi_turn_category_is_refused_with_the_choices() -> None:
    with pytest.raises(ValueError, match="no single-turn BFCL category 'multi_turn_base'"):
        load_cases("multi_turn_base")
    with pytest.raises(ValueError, match="simple_python"):
        load_cases("simpel_python")


def test_the_ground_truth_grades_correct_and_a_wrong_value_does_not() -> None:
    case = load_cases("simple_python")[0]
    calls = right_calls(case)
    assert grade(case, calls) == (True, "")
    ((key, _value),) = list(calls[0]["arguments"].items())[:1]
    wrong = [{"name": calls[0]["name"], "arguments": {**calls[0]["arguments"], key: "nonsense"}}]
    ok, why = grade(case, wrong)
    assert not ok
    assert why


def test_parallel_calls_are_graded_in_any_order() -> None:
    case = load_cases("parallel")[0]
    calls = right_calls(case)
    assert len(calls) > 1
    assert grade(case, list(reversed(calls)))[0]
    assert not grade(case, calls[:1])[0]


def test_an_irrelevance_case_is_correct_exactly_when_no_function_is_called() -> None:
    case = load_cases("irrelevance")[0]
    assert case.expects_no_call
    assert grade(case, []) == (True, "")
    name = openai_tools(case.functions)[0]["function"]["name"]
    assert grade(case, [{"name": name, "arguments": {}}])[0] is False


def test_function_docs_become_openai_tools_with_json_schema_types() -> None:
    case = next(c for c in load_cases("simple_python", None) if "." in c.functions[0]["name"])
    (tool,) = openai_tools(case.functions)
    assert tool["function"]["name"] == tool_name(case.functions[0]["name"])
    assert "." not in tool["function"]["name"]
    assert tool["function"]["parameters"]["type"] == "object"
    types = {p["type"] for p in tool["function"]["parameters"]["properties"].values()}
    assert types <= {"string", "integer", "number", "boolean", "array", "object"}
    assert case.functions[0]["parameters"]["type"] == "dict"  # the case itself is untouched


def test_calls_are_read_leniently_from_fences_tags_and_prose() -> None:
    names = ["get_weather", "add"]
    text = (
        'Sure!\n```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```\n'
        'and <tool_call>{"name": "add", "parameters": {"a": 1}}</tool_call> '
        '{"name": "unknown", "arguments": {}}'
    )
    assert calls_in_text(text, names) == [
        {"name": "get_weather", "arguments": {"city": "Paris"}},
        {"name": "add", "arguments": {"a": 1}},
    ]
    assert calls_in_text("no call {broken", names) == []


async def test_raw_takes_the_native_tool_calls_of_one_completion() -> None:
    case = load_cases("simple_python")[0]
    call = right_calls(case)[0]
    with running_server() as server:
        server.script(
            Reply(
                body=completion(
                    None,
                    tool_calls=[
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {
                                "name": call["name"],
                                "arguments": json.dumps(call["arguments"]),
                            },
                        }
                    ],
                    prompt_tokens=120,
                    completion_tokens=30,
                )
            )
        )
        import httpx

        async with httpx.AsyncClient() as client:
            outcome = await run_raw(case, Server(server.base_url), client)
        body = server.requests[0].json
    assert outcome.calls == [call]
    assert (outcome.llm_calls, outcome.prompt_tokens, outcome.completion_tokens) == (1, 120, 30)
    assert body["tools"] == openai_tools(case.functions)
    assert (body["temperature"], body["seed"]) == (0.0, 7)


async def test_subagent_corrects_a_call_with_feedback_naming_the_argument_and_type() -> None:
    case, call, key = an_int_argument()
    wrong = {**call, "arguments": {**call["arguments"], key: "a string"}}
    with running_server() as server:
        server.script(
            Reply(body=completion(json.dumps(wrong))), Reply(body=completion(json.dumps([call])))
        )
        async with OpenAIChat(model="local", base_url=server.base_url, _environ={}) as llm:
            outcome = await run_subagent_contract(
                case, Server(server.base_url), llm, return_retries=1
            )
        correction = server.requests[1].json["messages"][-1]["content"]
    assert outcome.calls == [call]
    assert outcome.first_calls == [wrong]
    assert grade(case, outcome.calls)[0] and not grade(case, outcome.first_calls)[0]
    assert outcome.llm_calls == 2
    assert f"argument '{key}' must be of type" in correction


async def test_subagent_answers_no_call_on_an_irrelevance_case_with_an_empty_list() -> None:
    case = load_cases("irrelevance")[0]
    with running_server() as server:
        server.script(Reply(body=completion("[]")))
        async with OpenAIChat(model="local", base_url=server.base_url, _environ={}) as llm:
            outcome = await run_subagent_contract(
                case, Server(server.base_url), llm, return_retries=0
            )
    assert outcome.calls == [] and outcome.error is None
    assert grade(case, outcome.calls)[0]


async def test_the_runner_records_each_case_and_resumes_without_repeating_one(
    tmp_path: Path,
) -> None:
    cases = load_cases("irrelevance")[:3]
    path = record_path(tmp_path, "raw", "template")
    raw = system_named("raw")
    with running_server() as server:
        server.script(Reply(body=completion("I cannot help with that.")))
        assert await run_cases(raw, cases[:1], Server(server.base_url), path, "template") == 1
        with path.open("a") as file:  # a kill in the middle of the next line
            file.write('{"system": "raw", "cat')
        todo = pending(cases, path)
        assert [c.id for c in todo] == [c.id for c in cases[1:]]
        server.script(*(Reply(body=completion("No.")) for _ in todo))
        assert await run_cases(raw, todo, Server(server.base_url), path, "template") == 2
        assert len(server.requests) == 3
    records = read_lines(path)
    assert [r["id"] for r in records] == [c.id for c in cases]
    assert pending(cases, path) == []


async def test_a_system_that_raises_is_recorded_as_an_error_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    cases = load_cases("simple_python")[:2]
    path = record_path(tmp_path, "raw", "template")
    with running_server() as server:
        server.script(Reply.error(400, "bad request"), Reply(body=completion("text")))
        await run_cases(system_named("raw"), cases, Server(server.base_url), path, "template")
    first, second = read_lines(path)
    assert "HTTPStatusError" in first["outcome"]["error"]
    assert second["outcome"]["error"] is None


def test_the_report_grades_records_and_derives_raw_lenient_from_raw_text() -> None:
    case = load_cases("simple_python")[0]
    call = right_calls(case)[0]
    record = recorded(
        "raw", case, [], text=json.dumps(call), prompt_tokens=100, completion_tokens=20
    )
    edited = {**record, "digest": "stale"}
    prompted = {**record, "system": "raw-prompted"}
    rows = {row.system: row for row in rows_from([record, edited, prompted])}
    assert rows["raw@template"].correct == 0 and rows["raw@template"].n == 1
    assert rows["raw-lenient@template"].correct == 1
    assert rows["raw-lenient@template"].tokens == 120
    assert rows["raw-prompted-lenient@template"].correct == 1


def test_the_salvage_rate_counts_wrong_first_attempts_that_ended_correct() -> None:
    case = load_cases("simple_python")[0]
    call = right_calls(case)[0]
    record = recorded(
        "subagent-r1", case, [call], first_calls=[], llm_calls=2, prompt_tokens=10,
        turns=[{"text": "x"}, {"text": "x"}],
    )  # fmt: skip
    (row,) = rows_from([record])
    assert (row.first_wrong, row.salvaged) == (1, 1)
    assert (row.repeats, row.corrections) == (1, 1)


def test_the_wilson_interval_brackets_the_proportion() -> None:
    low, high = wilson(45, 50)
    assert 0.78 < low < 0.9 < high < 0.97
    assert wilson(0, 0) == (0.0, 0.0)
    assert wilson(0, 10)[0] == 0.0


@pytest.mark.parametrize("protocol", ["native", "react"])
async def test_a_call_through_the_tools_ends_the_run_with_the_call_as_output(
    protocol: str,
) -> None:
    case = load_cases("simple_python")[0]
    call = right_calls(case)[0]
    if protocol == "native":
        first = completion(None, tool_calls=[{"id": "c1", "type": "function", "function": {
            "name": call["name"], "arguments": json.dumps(call["arguments"])}}])  # fmt: skip
    else:
        action = json.dumps({"tool": call["name"], "input": call["arguments"]})
        first = completion(f"Thought: I call it.\nAction: {action}")
    with running_server() as server:
        server.script(Reply(body=first))
        async with OpenAIChat(model="local", base_url=server.base_url, _environ={}) as llm:
            outcome = await run_subagent_tools(
                case, Server(server.base_url), llm, protocol=protocol, return_retries=1
            )
        sent = server.requests[0].json
    assert outcome.calls == [call] and outcome.error is None
    assert outcome.llm_calls == 1
    if protocol == "native":  # the schema reaches the model as BFCL's converter made it
        assert (
            sent["tools"][0]["function"]["parameters"]
            == (openai_tools(case.functions)[0]["function"]["parameters"])
        )


def test_the_page_shows_what_the_committed_bfcl_records_give() -> None:
    page = PAGE.read_text(encoding="utf-8")
    assert update_page(page, section()[0]) == page, "run: make eval-report"


def test_a_page_lacking_the_bfcl_markers_is_an_error() -> None:
    with pytest.raises(ValueError, match="lacks the bfcl-report markers"):
        update_page("# a page\n", "table")


async def test_tools_text_takes_a_call_written_as_text_and_prose_as_no_call() -> None:
    case = load_cases("simple_python")[0]
    call = right_calls(case)[0]
    irrelevant = load_cases("irrelevance")[0]
    with running_server() as server:
        server.script(
            Reply(body=completion(f"```json\n{json.dumps(call)}\n```")),
            Reply(body=completion("None of these functions can tell you that.")),
        )
        async with OpenAIChat(
            model="local", base_url=server.base_url, text_tool_calls=True, _environ={}
        ) as llm:
            called = await run_subagent_tools_text(case, Server(server.base_url), llm)
            declined = await run_subagent_tools_text(irrelevant, Server(server.base_url), llm)
    assert called.calls == [call] and called.llm_calls == 1
    assert grade(case, called.calls)[0]
    assert declined.calls == [] and declined.error is None
    assert grade(irrelevant, declined.calls)[0]


def test_the_case_for_case_table_compares_only_the_cases_every_system_ran() -> None:
    first, second = load_cases("simple_python")[:2]

    records = [
        recorded("raw", first, []),  # wrong
        recorded("raw", second, right_calls(second)),  # right, but only raw ran it
        recorded("subagent-r1", first, right_calls(first)),
    ]
    systems = ("raw@template", "subagent-r1@template")
    table = head_to_head(records, systems)
    assert table == {"simple_python": (1, {"raw@template": 0, "subagent-r1@template": 1})}
    assert render_head_to_head(table, systems).splitlines()[-1] == (
        "| all | 1 | **0%** (0/1) | **100%** (1/1) |"
    )


def test_the_list_is_chosen_when_it_extends_the_native_answer_with_more_distinct_calls() -> None:
    a = {"name": "f", "arguments": {"x": 1}}
    b = {"name": "f", "arguments": {"x": 2}}
    c = {"name": "g", "arguments": {}}
    assert chosen_calls([a], [a, b]) == [a, b]  # several things asked: the list
    assert chosen_calls([c], [a, b]) == [c]  # the forms disagree on the call: native
    assert chosen_calls([], [a, b]) == []  # native called nothing: no call
    assert chosen_calls([a], [a, a]) == [a]  # a repeated call is one call: native kept
    assert chosen_calls([a], []) == [a]  # the list's abstention does not overrule a call
    assert chosen_calls([], []) == []
    assert chosen_calls([a, b], [b, a, a]) == [a, b]  # native already made several


def test_the_chosen_system_is_graded_from_both_parts_on_the_cases_both_ran() -> None:
    parallel = load_cases("parallel")[0]
    single = load_cases("simple_python")[0]

    def record(system: str, case: Any, calls: list[dict[str, Any]]) -> dict[str, Any]:
        return recorded(
            system, case, calls, first_calls=calls, prompt_tokens=100, completion_tokens=10
        )

    records = [
        record("subagent-prompted-r1", parallel, right_calls(parallel)[:1]),  # one of several
        record("subagent-r1", parallel, right_calls(parallel)),
        record("subagent-prompted-r1", single, right_calls(single)),  # the list never ran it
    ]
    (chosen,) = chosen_records(records)
    assert chosen["id"] == parallel.id
    assert chosen["outcome"]["calls"] == right_calls(parallel)
    assert chosen["outcome"]["llm_calls"] == 2 and chosen["outcome"]["prompt_tokens"] == 200
    rows = {(row.system, row.category): row for row in rows_from([*records, chosen])}
    assert rows[("subagent-choose-r1@template", "parallel")].correct == 1
    assert rows[("subagent-prompted-r1@template", "parallel")].correct == 0
    assert ("subagent-choose-r1@template", "simple_python") not in rows


def test_a_peers_first_response_becomes_its_outcome() -> None:
    from types import SimpleNamespace

    from bfcl_peers import _first_response

    call = {"name": "f", "arguments": {"x": 1}}
    usage = SimpleNamespace(requests=1, input_tokens=30, output_tokens=7)
    outcome = _first_response([call], "", usage)
    assert outcome.calls == [call]
    assert (outcome.llm_calls, outcome.prompt_tokens, outcome.completion_tokens) == (1, 30, 7)
    assert outcome.turns == [{"text": "", "calls": [call]}]


def native_call(call: dict[str, Any], call_id: str = "c1") -> dict[str, Any]:
    """A completion whose reply is ``call`` as a native tool call."""
    return completion(None, tool_calls=[{"id": call_id, "type": "function", "function": {
        "name": call["name"], "arguments": json.dumps(call["arguments"])}}])  # fmt: skip


async def test_the_oracle_feeds_back_the_checkers_finding_and_its_correction_is_the_answer() -> (
    None
):
    case, call, key = an_int_argument()
    wrong = {**call, "arguments": {**call["arguments"], key: call["arguments"][key] + 1}}
    with running_server() as server:
        # The correction is a must-return turn (no tools): the answer is written as text.
        server.script(Reply(body=native_call(wrong)), Reply(body=completion(json.dumps([call]))))
        async with OpenAIChat(model="local", base_url=server.base_url, _environ={}) as llm:
            outcome = await run_subagent_tools(
                case, Server(server.base_url), llm, protocol="native", return_retries=1,
                oracle=True,
            )  # fmt: skip
        correction = json.dumps(server.requests[1].json["messages"])
    assert outcome.first_calls == [wrong]
    assert outcome.calls == [call]  # the rejected turn's call is not carried into the answer
    assert outcome.llm_calls == 2
    assert f"Invalid value for parameter '{key}'" in correction
    assert "Call a tool again" not in correction


def test_oracle_feedback_names_the_count_and_the_no_call_rule() -> None:
    parallel = load_cases("parallel")[0]
    irrelevant = load_cases("irrelevance")[0]
    one = right_calls(parallel)[:1]
    assert oracle_feedback(parallel, right_calls(parallel)) is None
    assert oracle_feedback(parallel, one) == (
        f"the request needs {len(parallel.answer)} function call(s); you made 1"
    )
    assert oracle_feedback(irrelevant, []) is None
    assert "call none" in str(oracle_feedback(irrelevant, one))


def test_a_call_with_its_arguments_as_a_json_string_is_read_as_the_object() -> None:
    from bfcl_systems import Calls

    read = Calls.model_validate({"name": "f", "arguments": json.dumps({"a": 1})})
    assert [c.model_dump() for c in read.root] == [{"name": "f", "arguments": {"a": 1}}]
    with pytest.raises(ValueError, match="arguments"):
        Calls.model_validate([{"name": "f", "arguments": "not json"}])


def test_an_offset_runs_the_cases_after_the_default_sample(tmp_path: Path) -> None:
    from run_bfcl import main

    with running_server() as server:
        server.script(*(Reply(body=completion("No.")) for _ in range(2)))
        options = {
            "--base-url": server.base_url,
            "--systems": "raw",
            "--categories": "irrelevance",
            "--offset": "3",
            "--cases": "2",
            "--results": str(tmp_path),
        }
        main([part for option in options.items() for part in option])
    records = read_lines(record_path(tmp_path, "raw", "template"))
    assert [r["id"] for r in records] == [c.id for c in load_cases("irrelevance", 5)[3:]]


def test_the_peers_table_is_left_out_when_no_peer_ran(tmp_path: Path) -> None:
    case = load_cases("simple_python")[0]
    for system in ("raw", "subagent-prompted-r1"):
        record = recorded(system, case, right_calls(case))
        record_path(tmp_path, system, "template").write_text(json.dumps(record) + "\n")
    text, _ = section(tmp_path)
    assert "Case for case" in text and "Against the peers" not in text
    peer = {**recorded("pydantic-ai", case, []), "setup": "tools"}
    record_path(tmp_path, "pydantic-ai", "tools").write_text(json.dumps(peer) + "\n")
    assert "Against the peers" in section(tmp_path)[0]
