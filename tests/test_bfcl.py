"""The BFCL harness (eval/bfcl_*.py, eval/run_bfcl.py) on subagent.evals: sampling, grading
(BFCL's checker as a judge), systems as variants or evals systems, resume, the report, the
conversion of the old records.

No model runs here: the systems talk to a scripted OpenAI-compatible server on 127.0.0.1,
and grading is BFCL's own checker from the installed ``bfcl-eval`` package.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from bfcl_data import (
    DEFAULT_CATEGORIES,
    SAMPLE_SIZE,
    BfclChecker,
    calls_of,
    calls_schema,
    category,
    expects_no_call,
    functions,
    grade,
    load_cases,
    openai_tools,
    tool_name,
)
from bfcl_report import (
    PAGE,
    graded,
    head_to_head,
    read,
    render_head_to_head,
    rows_from,
    section,
    update_page,
)
from bfcl_systems import (
    CALLS_PROMPT,
    Calls,
    Server,
    ToolsAgent,
    chosen_calls,
    oracle_feedback,
    run_raw,
    system_named,
)
from convert_records import convert_folder
from openai_server import Reply, completion, running_server
from run_bfcl import client_for, count_records, main, pending, record_path, run_cases

from subagent.evals import Dataset, JudgeContext, SystemReply, SystemRun, read_records

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[1]


def right_calls(case: Any) -> list[dict[str, Any]]:
    """The first allowed value of every argument of the ground truth, as calls."""
    calls = []
    for answer in case.expected:
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


def native_call(call: dict[str, Any], call_id: str = "c1") -> dict[str, Any]:
    """A completion whose reply is ``call`` as a native tool call."""
    return completion(None, tool_calls=[{"id": call_id, "type": "function", "function": {
        "name": call["name"], "arguments": json.dumps(call["arguments"])}}])  # fmt: skip


async def run_system(
    name: str, cases: list[Any], url: str, folder: Path, setup: str = "template"
) -> list[dict[str, Any]]:
    """Run ``cases`` through the system called ``name`` as the runner does; its records."""
    system = system_named(name)
    server = Server(url, setup=setup)
    path = record_path(folder, name, setup)
    client = client_for(system, server)
    async with client if client is not None else httpx.AsyncClient() as opened:
        await run_cases(system, Dataset(cases, [BfclChecker()], name="bfcl"), server,
                        opened if client is not None else None, path, setup)  # fmt: skip
    return list(read_records(path))


async def record(
    folder: Path, name: str, case: Any, run: SystemRun, setup: str = "template"
) -> None:
    """A record of ``case`` by the system called ``name``, as if it had run: ``run``."""
    system = system_named(name)
    server = Server("http://127.0.0.1:1/v1", setup=setup)
    client = client_for(system, server)
    options = {"llm": client} if system.kind == "subagent" else {}
    await Dataset([case], [BfclChecker()], name="bfcl").import_runs(
        system.target(server, client), [system.variant(setup)],
        [(case.name, system.variant(setup).name, run)], out=record_path(folder, name, setup),
        **options,
    )  # fmt: skip


def answered(calls: list[dict[str, Any]], *texts: str, **fields: Any) -> SystemRun:
    """A run whose output is ``calls``, after replies of ``texts`` (the last one answering)."""
    replies = [SystemReply(text=text, error="refused") for text in texts[:-1]]
    last = SystemReply(text=texts[-1] if texts else "", tool_calls=[] if texts else calls)
    return SystemRun(output=calls, replies=[*replies, last], input_tokens=100,
                     output_tokens=10, **fields)  # fmt: skip


# --- the data and the checker ---


def test_every_default_category_has_a_fixed_sample_of_fifty_cases() -> None:
    for name in DEFAULT_CATEGORIES:
        sample = load_cases(name)
        assert len(sample) == SAMPLE_SIZE
        assert len({case.name for case in sample}) == SAMPLE_SIZE
        assert [case.name for case in load_cases(name)] == [case.name for case in sample]
        assert {category(case) for case in sample} == {name}
        whole = load_cases(name, None)
        assert len(whole) > SAMPLE_SIZE
        # the sample is spread over the category, not its first lines
        numbers = [int(case.name.rsplit("_", 1)[1]) for case in sample]
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
    assert expects_no_call(case) and case.expected is None
    assert grade(case, []) == (True, "")
    name = openai_tools(functions(case))[0]["function"]["name"]
    assert grade(case, [{"name": name, "arguments": {}}])[0] is False


async def test_the_checker_judges_any_form_of_the_calls() -> None:
    case = load_cases("simple_python")[0]
    calls = right_calls(case)
    as_model = Calls.model_validate(calls)
    for output in (as_model, calls, calls[0], json.dumps(calls)):
        assert calls_of(output) == calls
        verdict = await BfclChecker().judge(JudgeContext(case, output, None, "v"))
        assert verdict.passed and verdict.reason is None
    assert calls_of("None of these can help.") == calls_of(None) == []
    wrong = await BfclChecker().judge(JudgeContext(case, [], None, "v"))
    assert not wrong.passed and wrong.reason == "no function was called"


def test_function_docs_become_openai_tools_with_json_schema_types() -> None:
    case = next(c for c in load_cases("simple_python", None) if "." in functions(c)[0]["name"])
    (tool,) = openai_tools(functions(case))
    assert tool["function"]["name"] == tool_name(functions(case)[0]["name"])
    assert "." not in tool["function"]["name"]
    assert tool["function"]["parameters"]["type"] == "object"
    types = {p["type"] for p in tool["function"]["parameters"]["properties"].values()}
    assert types <= {"string", "integer", "number", "boolean", "array", "object"}
    assert functions(case)[0]["parameters"]["type"] == "dict"  # the case itself is untouched


def test_calls_are_read_leniently_from_fences_tags_and_prose() -> None:
    from bfcl_systems import calls_in_text

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


# --- the systems ---


async def test_raw_takes_the_native_tool_calls_of_one_completion() -> None:
    case = load_cases("simple_python")[0]
    call = right_calls(case)[0]
    with running_server() as server:
        body = native_call(call)
        body["usage"] = {"prompt_tokens": 120, "completion_tokens": 30}
        server.script(Reply(body=body))
        async with httpx.AsyncClient() as client:
            run = await run_raw(case, server=Server(server.base_url), client=client)
        sent = server.requests[0].json
    assert run.output == [call] and run.ok
    assert (run.llm_calls, run.input_tokens, run.output_tokens) == (1, 120, 30)
    assert run.replies[0].tool_calls == [call]
    assert sent["tools"] == openai_tools(functions(case))
    assert (sent["temperature"], sent["seed"]) == (0.0, 7)


async def test_subagent_corrects_a_call_with_feedback_naming_the_argument_and_type(
    tmp_path: Path,
) -> None:
    case, call, key = an_int_argument()
    wrong = {**call, "arguments": {**call["arguments"], key: "a string"}}
    with running_server() as server:
        server.script(
            Reply(body=completion(json.dumps(wrong))), Reply(body=completion(json.dumps([call])))
        )
        (done,) = await run_system("subagent-r1", [case], server.base_url, tmp_path)
        sent = server.requests[0].json["messages"]
        correction = server.requests[1].json["messages"][-1]["content"]
    assert done["correct"] and done["step"]["output"] == [call]
    assert [turn["type"] for turn in done["step"]["turns"]] == ["must_return", "retry"]
    assert f"argument '{key}' must be of type" in correction
    # the functions reach the model in the one system message, after subagent's own prompt
    assert sent[0]["role"] == "system" and functions(case)[0]["description"] in sent[0]["content"]
    assert [m["role"] for m in sent[1:]] == ["user"]
    (graded_run,) = [o for o in graded(read_records(record_path(tmp_path, "subagent-r1",
                                                                "template")),
                                       {case.name: case}).outcomes]  # fmt: skip
    assert graded_run.corrected and graded_run.salvaged


async def test_the_schema_corrected_system_sends_its_correction_under_the_calls_grammar(
    tmp_path: Path,
) -> None:
    case, call, key = an_int_argument()
    wrong = {**call, "arguments": {**call["arguments"], key: "a string"}}
    with running_server() as server:
        server.script(
            Reply(body=native_call(wrong)),  # normal turn: a call the tool's schema refuses
            Reply(body=completion(json.dumps([wrong]))),  # must_return: refused again
            Reply(body=completion(json.dumps([call]))),  # retry: under the grammar
        )
        (done,) = await run_system("subagent-prompted-r1-schema", [case], server.base_url,
                                   tmp_path)  # fmt: skip
        formats = [request.response_format for request in server.requests]
    assert formats[:2] == [None, None]  # the first attempt as subagent-prompted-r1's
    assert formats[2]["json_schema"]["schema"] == calls_schema(case)
    assert done["correct"] and done["step"]["output"] == [call]
    assert [turn["type"] for turn in done["step"]["turns"]] == ["normal", "must_return", "retry"]
    (outcome,) = graded([done], {case.name: case}).outcomes
    assert outcome.corrected and outcome.salvaged


async def test_subagent_answers_no_call_on_an_irrelevance_case_with_an_empty_list(
    tmp_path: Path,
) -> None:
    case = load_cases("irrelevance")[0]
    with running_server() as server:
        server.script(Reply(body=completion("[]")))
        (done,) = await run_system("subagent-r0", [case], server.base_url, tmp_path)
    assert done["correct"] and done["step"]["output"] == [] and done["step"]["failure"] is None


async def test_a_failed_run_is_never_scored_as_no_call_on_irrelevance(tmp_path: Path) -> None:
    case = load_cases("irrelevance")[0]
    name = openai_tools(functions(case))[0]["function"]["name"]
    call = json.dumps({"name": f"{name}_nonexistent", "arguments": {}})
    with running_server() as server:
        # a function that does not exist, twice: the run fails, having answered nothing
        server.script(Reply(body=completion(call)), Reply(body=completion(call)))
        (failed,) = await run_system("subagent-r1", [case], server.base_url, tmp_path)
        server.script(Reply.error(500, "down"), Reply.error(500, "down"))
        (raised,) = await run_system("raw", [case], server.base_url, tmp_path)
    assert failed["step"]["failure"]["reason"] == "budget_exhausted" and not failed["correct"]
    assert raised["run"]["failure"] == "error" and "HTTPStatusError" in raised["run"]["message"]
    assert not raised["correct"] and raised["verdicts"] == []
    text, _ = section(tmp_path)
    irrelevance = text.split("On `irrelevance`", 1)[1]
    assert "| `subagent-r1@template` | 1 | 0 | 0 | 1 |" in irrelevance
    assert "| `raw@template` | 1 | 0 | 0 | 1 |" in irrelevance
    assert "| `raw-lenient@template` | 1 | 0 | 0 | 1 |" in irrelevance  # derived: failed too


async def test_the_runner_records_each_case_and_resumes_without_repeating_one(
    tmp_path: Path,
) -> None:
    cases = load_cases("irrelevance")[:3]
    raw = system_named("raw")
    path = record_path(tmp_path, "raw", "template")
    with running_server() as server:
        server.script(Reply(body=completion("I cannot help with that.")))
        await run_system("raw", cases[:1], server.base_url, tmp_path)
        with path.open("a") as file:  # a kill in the middle of the next line
            file.write('{"case": "irrelevance_1", "cat')
        chosen = Dataset(cases, [BfclChecker()], name="bfcl")
        assert pending(raw, chosen, Server(server.base_url), None, path, "template") == 2
        server.script(*(Reply(body=completion("No.")) for _ in range(2)))
        await run_system("raw", cases, server.base_url, tmp_path)
        assert len(server.requests) == 3
    records = list(read_records(path))
    assert [r["case"] for r in records] == [c.name for c in cases]
    assert all(r["correct"] for r in records)
    assert pending(raw, chosen, Server(server.base_url), None, path, "template") == 0


@pytest.mark.parametrize("protocol", ["native", "react"])
async def test_a_call_through_the_tools_ends_the_run_with_the_call_as_output(
    tmp_path: Path, protocol: str
) -> None:
    case = load_cases("simple_python")[0]
    call = right_calls(case)[0]
    if protocol == "native":
        first = native_call(call)
    else:
        action = json.dumps({"tool": call["name"], "input": call["arguments"]})
        first = completion(f"Thought: I call it.\nAction: {action}")
    name = "subagent-tools-r1" if protocol == "native" else "subagent-react-r1"
    with running_server() as server:
        server.script(Reply(body=first))
        (done,) = await run_system(name, [case], server.base_url, tmp_path)
        sent = server.requests[0].json
    assert done["correct"] and done["step"]["output"] == [call]
    assert len(done["step"]["turns"]) == 1
    if protocol == "native":  # the schema reaches the model as BFCL's converter made it
        assert (
            sent["tools"][0]["function"]["parameters"]
            == (openai_tools(functions(case))[0]["function"]["parameters"])
        )


async def test_tools_text_takes_a_call_written_as_text_and_prose_as_no_call(
    tmp_path: Path,
) -> None:
    case = load_cases("simple_python")[0]
    call = right_calls(case)[0]
    irrelevant = load_cases("irrelevance")[0]
    with running_server() as server:
        server.script(
            Reply(body=completion(f"```json\n{json.dumps(call)}\n```")),
            Reply(body=completion("None of these functions can tell you that.")),
        )
        called, declined = await run_system(
            "subagent-tools-text", [case, irrelevant], server.base_url, tmp_path
        )
    assert called["correct"] and calls_of(called["step"]["output"]) == [call]
    assert len(called["step"]["turns"]) == 1
    assert declined["correct"] and calls_of(declined["step"]["output"]) == []


async def test_the_oracle_feeds_back_the_checkers_finding_and_its_correction_is_the_answer(
    tmp_path: Path,
) -> None:
    case, call, key = an_int_argument()
    wrong = {**call, "arguments": {**call["arguments"], key: call["arguments"][key] + 1}}
    with running_server() as server:
        # The correction is a must-return turn (no tools): the answer is written as text.
        server.script(Reply(body=native_call(wrong)), Reply(body=completion(json.dumps([call]))))
        (done,) = await run_system("subagent-oracle-r1", [case], server.base_url, tmp_path)
        correction = json.dumps(server.requests[1].json["messages"])
    assert done["step"]["output"] == [call]  # the rejected turn's call is not carried over
    assert done["correct"] and len(done["step"]["turns"]) == 2
    assert f"Invalid value for parameter '{key}'" in correction
    assert "Call a tool again" not in correction
    found = graded([done], {case.name: case})
    (outcome,) = found.outcomes
    # the second work turn (must_return) fixed it: salvaged, but by no correction turn
    assert not outcome.corrected and outcome.correct
    key = ("subagent-oracle-r1@template", "simple_python")
    assert (found.first_wrong[key], found.first_wrong_salvaged[key]) == (1, 1)


def test_oracle_feedback_names_the_count_and_the_no_call_rule() -> None:
    parallel = load_cases("parallel")[0]
    irrelevant = load_cases("irrelevance")[0]
    one = right_calls(parallel)[:1]
    assert oracle_feedback(parallel, right_calls(parallel)) is None
    assert oracle_feedback(parallel, one) == (
        f"the request needs {len(parallel.expected)} function call(s); you made 1"
    )
    assert oracle_feedback(irrelevant, []) is None
    assert "call none" in str(oracle_feedback(irrelevant, one))


def test_a_call_with_its_arguments_as_a_json_string_is_read_as_the_object() -> None:
    read_back = Calls.model_validate({"name": "f", "arguments": json.dumps({"a": 1})})
    assert [c.model_dump() for c in read_back.root] == [{"name": "f", "arguments": {"a": 1}}]
    with pytest.raises(ValueError, match="arguments"):
        Calls.model_validate([{"name": "f", "arguments": "not json"}])


def test_a_peers_first_response_becomes_its_run() -> None:
    from bfcl_peers import _first_response

    call = {"name": "f", "arguments": {"x": 1}}
    usage = SimpleNamespace(requests=1, input_tokens=30, output_tokens=7)
    run = _first_response([call], "", usage)
    assert run.output == [call] and run.ok
    assert (run.llm_calls, run.input_tokens, run.output_tokens) == (1, 30, 7)
    assert run.replies == [SystemReply(text="", tool_calls=[call])]


# --- the runner's command line and provenance ---


@pytest.mark.parametrize(
    "name", ["raw", "raw-prompted", "subagent-prompted-r1", "subagent-oracle-r1"]
)
def test_a_resumed_run_keeps_every_committed_run_of_the_1_5b(name: str) -> None:
    # A variant's digest covers its agent factory's fields: a field added to a factory
    # (issue 26: ToolsAgent's schema corrections) made hours of committed runs look changed,
    # and a resumed run began them again.
    folder = ROOT / "eval" / "results" / "bfcl-qwen1.5b"
    system = system_named(name)
    server = Server("http://127.0.0.1:1/v1", setup="template")
    path = record_path(folder, name, "template")
    recorded = {record["case"] for record in read_records(path)}
    cases = [case for category in DEFAULT_CATEGORIES for case in load_cases(category)]
    ran = Dataset([c for c in cases if c.name in recorded], [BfclChecker()], name="bfcl")
    assert len(ran) >= 50, f"{name}: too few committed runs to check"
    assert pending(system, ran, server, client_for(system, server), path, "template") == 0


def test_an_offset_runs_the_cases_after_the_default_sample(tmp_path: Path) -> None:
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
        main([part for option in options.items() for part in option])  # nothing left
        assert len(server.requests) == 2
    records = list(read_records(record_path(tmp_path, "raw", "template")))
    assert [r["case"] for r in records] == [c.name for c in load_cases("irrelevance", 5)[3:]]
    # the provenance counts the records, not the runs made (issue 26)
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["records"] == count_records(tmp_path) == 2 and "cases" not in meta


def test_only_runs_the_named_cases_of_the_sample_and_refuses_a_name_outside_it(
    tmp_path: Path,
) -> None:
    chosen = [c.name for c in load_cases("irrelevance", 5)[1:4:2]]
    with running_server() as server:
        server.script(*(Reply(body=completion("No.")) for _ in range(2)))
        options = {
            "--base-url": server.base_url,
            "--systems": "raw",
            "--categories": "irrelevance",
            "--cases": "5",
            "--results": str(tmp_path),
        }
        argv = [part for option in options.items() for part in option]  # fmt: skip
        main([*argv, "--only", ",".join(chosen)])
        assert len(server.requests) == 2
        with pytest.raises(SystemExit, match="not in the sample: irrelevance_9999"):
            main([*argv, "--only", "irrelevance_9999"])
    records = list(read_records(record_path(tmp_path, "raw", "template")))
    assert [r["case"] for r in records] == chosen


def test_the_parsed_set_up_runs_through_the_calls_proxy(tmp_path: Path) -> None:
    (case,) = load_cases("simple_python", 1)
    (call,) = right_calls(case)[:1]
    with running_server() as server:
        text = f"<tool_call>\n{json.dumps(call)}\n</tool_call>"
        server.script(Reply(body=completion(text)))
        argv = ["--base-url", server.base_url, "--systems", "raw", "--setup", "parsed",
                "--categories", "simple_python", "--cases", "1"]  # fmt: skip
        main([*argv, "--results", str(tmp_path)])
    (done,) = read_records(record_path(tmp_path, "raw", "parsed"))
    # raw reads native calls only: the call written as text reached it as a native one
    assert done["correct"] and done["run"]["output"] == [call]


def test_the_held_out_command_of_the_page_says_what_its_records_hold() -> None:
    page = PAGE.read_text(encoding="utf-8")
    command = page[page.index("--results eval/results/bfcl-holdout") - 200 :]
    offset, cases = (int(n) for n in re.search(r"--offset (\d+) --cases (\d+)", command).groups())  # type: ignore[union-attr]
    folder = ROOT / "eval" / "results" / "bfcl-holdout"
    for path in folder.glob("*.jsonl"):
        by_category: dict[str, list[str]] = {}
        for r in read_records(path):
            by_category.setdefault(r["tags"][0], []).append(r["case"])
        for name, ran in by_category.items():
            held_out = [case.name for case in load_cases(name, offset + cases)[offset:]]
            assert sorted(ran) == sorted(held_out), (path.name, name)


# --- the report ---


async def test_the_report_grades_records_and_derives_raw_lenient_from_raw_text(
    tmp_path: Path,
) -> None:
    case = load_cases("simple_python")[0]
    call = right_calls(case)[0]
    as_text = SystemRun(output=[], replies=[SystemReply(text=json.dumps(call))],
                        input_tokens=100, output_tokens=20)  # fmt: skip
    await record(tmp_path, "raw", case, as_text)
    await record(tmp_path, "raw-prompted", case, as_text)
    rows = {row.system: row.result for row in rows_from(read(tmp_path))}
    assert (rows["raw@template"].correct, rows["raw@template"].runs) == (0, 1)
    assert rows["raw-lenient@template"].correct == 1
    lenient = rows["raw-lenient@template"]
    assert lenient.prompt_tokens + lenient.completion_tokens == 120
    assert rows["raw-prompted-lenient@template"].correct == 1


async def test_records_of_a_case_changed_since_they_ran_are_left_out(tmp_path: Path) -> None:
    case = load_cases("simple_python")[0]
    await record(tmp_path, "raw", case, answered(right_calls(case)))
    (line,) = list(read_records(record_path(tmp_path, "raw", "template")))
    assert graded([line], {case.name: case}).records == 1
    assert graded([{**line, "case_digest": "stale"}], {case.name: case}).records == 0


async def test_the_salvage_rate_counts_wrong_first_attempts_that_ended_correct(
    tmp_path: Path,
) -> None:
    case = load_cases("simple_python")[0]
    await record(tmp_path, "subagent-r1", case, answered(right_calls(case), "x", "x", "[]"))
    (row,) = rows_from(read(tmp_path))
    assert (row.first_wrong, row.first_wrong_salvaged) == (1, 1)
    result = row.result
    assert (result.corrected, result.salvaged) == (1, 1)
    assert (result.repeated_corrections, result.correction_turns) == (1, 2)


async def test_the_case_for_case_table_compares_only_the_cases_every_system_ran(
    tmp_path: Path,
) -> None:
    first, second = load_cases("simple_python")[:2]
    await record(tmp_path, "raw", first, answered([]))  # wrong
    await record(tmp_path, "raw", second, answered(right_calls(second)))  # only raw ran it
    await record(tmp_path, "subagent-r1", first, answered(right_calls(first)))
    systems = ("raw@template", "subagent-r1@template")
    table = head_to_head(read(tmp_path).outcomes, systems)
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


async def test_the_chosen_system_is_graded_from_both_parts_on_the_cases_both_ran(
    tmp_path: Path,
) -> None:
    parallel = load_cases("parallel")[0]
    single = load_cases("simple_python")[0]
    irrelevant = load_cases("irrelevance")[0]
    failed = SystemRun(failure="budget_exhausted", replies=[SystemReply(text="x")],
                       input_tokens=100, output_tokens=10)  # fmt: skip
    await record(tmp_path, "subagent-prompted-r1", parallel, answered(right_calls(parallel)[:1]))
    await record(tmp_path, "subagent-r1", parallel, answered(right_calls(parallel)))
    await record(tmp_path, "subagent-prompted-r1", single, answered(right_calls(single)))
    await record(tmp_path, "subagent-prompted-r1", irrelevant, failed)  # no answer: no call
    await record(tmp_path, "subagent-r1", irrelevant, answered([]))
    chosen = {
        o.case: o for o in read(tmp_path).outcomes if o.variant == "subagent-choose-r1@template"
    }
    assert set(chosen) == {parallel.name, irrelevant.name}  # the list never ran `single`
    assert chosen[parallel.name].correct and chosen[parallel.name].calls == 2
    assert chosen[parallel.name].input_tokens == 200
    assert not chosen[irrelevant.name].correct  # the native form failed: the choice did too


def test_the_page_shows_what_the_committed_bfcl_records_give() -> None:
    page = PAGE.read_text(encoding="utf-8")
    assert update_page(page, section()[0]) == page, "run: make eval-report"


def test_a_page_lacking_the_bfcl_markers_is_an_error() -> None:
    with pytest.raises(ValueError, match="lacks the bfcl-report markers"):
        update_page("# a page\n", "table")


async def test_the_peers_table_is_left_out_when_no_peer_ran(tmp_path: Path) -> None:
    case = load_cases("simple_python")[0]
    for name in ("raw", "subagent-prompted-r1"):
        await record(tmp_path, name, case, answered(right_calls(case)))
    text, _ = section(tmp_path)
    assert "Case for case" in text and "Against the peers" not in text
    await record(tmp_path, "pydantic-ai", case, answered([]), setup="tools")
    assert "Against the peers" in section(tmp_path)[0]


# --- the records of the harness before subagent.evals ---


def old_record(system: str, case: Any, outcome: dict[str, Any], setup: str = "template") -> str:
    """A line as ``run_bfcl.py`` wrote it before subagent.evals."""
    line = {"system": system, "setup": setup, "category": category(case), "id": case.name,
            "digest": case.metadata["bfcl_digest"], "outcome": outcome}  # fmt: skip
    return json.dumps(line) + "\n"


def old_outcome(
    calls: list[dict[str, Any]], *texts: str, error: str | None = None
) -> dict[str, Any]:
    turns = [{"phase_after": "retry", "text": t, "calls": [], "feedback": "wrong"}
             for t in texts[:-1]] + [{"phase_after": "done" if error is None else "failed",
                                      "text": texts[-1], "calls": [],
                                      "feedback": None if error is None else "wrong"}]  # fmt: skip
    return {"calls": calls, "first_calls": None, "text": texts[-1], "llm_calls": len(texts),
            "prompt_tokens": 90, "completion_tokens": 9, "turns": turns, "error": error,
            "seconds": 1.5}  # fmt: skip


async def test_old_records_convert_into_records_the_runner_resumes_from(tmp_path: Path) -> None:
    right, irrelevant = load_cases("simple_python")[0], load_cases("irrelevance")[0]
    path = record_path(tmp_path, "subagent-r1", "template")
    path.write_text(
        old_record("subagent-r1", right, old_outcome(right_calls(right), "x", "x", "[...]"))
        + old_record("subagent-r1", irrelevant,
                     old_outcome([], "f()", "f()", error="budget_exhausted: no valid answer"))
    )  # fmt: skip
    raw = record_path(tmp_path, "raw", "tools")
    timed_out = {**old_outcome([], ""), "error": "ReadTimeout: timed out"}
    raw.write_text(old_record("raw", irrelevant, timed_out, setup="tools"))
    (tmp_path / "meta.json").write_text(json.dumps({"cases": 7, "seconds": 3.0}))
    assert await convert_folder(tmp_path) == {path.name: 2, raw.name: 1}
    converted = list(read_records(path))
    assert [r["correct"] for r in converted] == [True, False]  # the failure is no answer
    assert converted[1]["run"]["failure"] == "budget_exhausted"
    assert [reply["error"] for reply in converted[0]["run"]["replies"]] == ["wrong", "wrong", None]
    (converted_raw,) = read_records(raw)
    assert converted_raw["run"]["failure"] == "error"
    assert converted_raw["run"]["message"] == "ReadTimeout: timed out"
    assert json.loads((tmp_path / "meta.json").read_text()) == {"seconds": 3.0, "records": 3}
    (row,) = [row for row in rows_from(read(tmp_path)) if row.system == "subagent-r1@template"
              and row.category == "simple_python"]  # fmt: skip
    assert (row.result.corrected, row.result.salvaged, row.result.repeated_corrections) == (1, 1, 1)
    system = system_named("subagent-r1")
    server = Server("http://127.0.0.1:1/v1")
    async with client_for(system, server) as chat:
        both = Dataset([right, irrelevant], [BfclChecker()], name="bfcl")
        assert pending(system, both, server, chat, path, "template") == 0
    assert await convert_folder(tmp_path) == {}  # nothing left to convert


async def test_an_old_record_of_a_case_changed_since_it_ran_is_refused(tmp_path: Path) -> None:
    case = load_cases("simple_python")[0]
    path = record_path(tmp_path, "raw", "template")
    path.write_text(old_record("raw", case, old_outcome([], "")).replace(
        case.metadata["bfcl_digest"], "0" * 16))  # fmt: skip
    with pytest.raises(ValueError, match=rf"raw@template.jsonl:1: case '{case.name}' changed"):
        await convert_folder(tmp_path)
    assert "outcome" in path.read_text()  # nothing lost


def test_the_default_systems_run_in_the_main_venv_and_the_peers_apart() -> None:
    assert {system_named(name).venv for name in ("pydantic-ai", "openai-agents")} == {"peers"}
    assert system_named("raw").kind == "raw" and system_named("subagent-r1").kind == "subagent"
    with pytest.raises(KeyError, match="no system 'nope'"):
        system_named("nope")


async def test_a_peer_runs_through_the_evaluation_as_a_system(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import bfcl_peers

    case = load_cases("irrelevance")[0]
    seen: list[str] = []

    async def fake_peer(name: str, given: Any, server: Server) -> SystemRun:
        seen.append(name)
        if name == "openai-agents":
            raise RecursionError("too deep")
        return SystemRun(output=[], replies=[SystemReply(text="no")], input_tokens=5)

    monkeypatch.setattr(bfcl_peers, "run_peer", fake_peer)
    for name in ("pydantic-ai", "openai-agents"):
        system = system_named(name)
        path = record_path(tmp_path, name, "tools")
        server = Server("http://127.0.0.1:1/v1", setup="tools")
        dataset = Dataset([case], [BfclChecker()], name="bfcl")
        await run_cases(system, dataset, server, None, path, "tools")
    assert seen == ["pydantic-ai", "openai-agents"]
    ((ok,), (raised,)) = (list(read_records(record_path(tmp_path, n, "tools")))
                          for n in ("pydantic-ai", "openai-agents"))  # fmt: skip
    assert ok["correct"] and ok["agent"] == "peers"
    assert raised["run"]["failure"] == "error" and not raised["correct"]


async def test_a_report_of_old_records_says_how_to_convert_them(tmp_path: Path) -> None:
    case = load_cases("irrelevance")[3]
    path = record_path(tmp_path, "raw", "template")
    path.write_text(old_record("raw", case, old_outcome([], "No.")))
    with pytest.raises(SystemExit, match=r"raw@template.jsonl\): convert them once with: python "
                       "eval/convert_records.py"):  # fmt: skip
        read(tmp_path)


def test_the_runner_converts_old_records_before_resuming_from_them(tmp_path: Path) -> None:
    first, second = load_cases("irrelevance", 5)[3:]
    path = record_path(tmp_path, "raw", "template")
    path.write_text(old_record("raw", first, old_outcome([], "No.")))
    with running_server() as server:
        server.script(Reply(body=completion("No.")))
        main(["--base-url", server.base_url, "--systems", "raw", "--categories", "irrelevance",
              "--offset", "3", "--cases", "2", "--results", str(tmp_path)])  # fmt: skip
        assert len(server.requests) == 1  # only the case the old records lacked
    assert [r["case"] for r in read_records(path)] == [first.name, second.name]


def test_the_calls_prompt_is_the_one_its_records_were_made_with_its_rule_the_librarys() -> None:
    # The rule for calls is the library's (prompts/tool_calls_rule.mustache): one source for
    # subagent's system prompt and this prompt, whose text raw-prompted's and
    # subagent-prompted-r1's records were made with, byte for byte.
    assert CALLS_PROMPT == (
        "Do what the user asks by calling the functions you are given. Your answer is the "
        'JSON list of every call the request needs, as {"name": <function name>, '
        '"arguments": {<argument>: <value>}} objects: one call for each thing the user asks '
        "for, and no call the request does not need; [] when none of the functions can do it."
    )


async def test_the_tool_agents_system_prompt_has_the_rule_and_the_calls_shape() -> None:
    from subagent import FunctionLLM, LLMRequest, LLMResponse

    case = load_cases("parallel", 1)[0]
    seen: list[LLMRequest] = []

    def reply(request: LLMRequest) -> LLMResponse:
        seen.append(request)
        return LLMResponse(text="[]")

    await ToolsAgent()(case).run(messages=case.messages, llm=FunctionLLM(reply), max_turns=2)
    system = seen[0].messages[0].content
    assert "Make one call for each thing the user asks for, and no call the request does " \
        "not need." in system  # fmt: skip
    assert 'Shaped like this, each <...> replaced by its value as JSON: [{"name": <name>, ' \
        '"arguments": {...}}]' in system  # fmt: skip
