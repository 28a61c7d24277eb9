"""The correction study (eval/correction_study.py): one first attempt, every setting resumed."""

from __future__ import annotations

from typing import Any

import pytest
from correction_study import (
    first_attempt,
    quoted,
    setting_options,
    setting_runs,
    variants_of,
)
from pydantic import BaseModel

from subagent import Correction, FailReason, ScriptedLLM, SubAgent

pytestmark = pytest.mark.anyio


class Answer(BaseModel):
    value: int


GOOD, BAD = '{"value": 3}', "three"
AGENT = SubAgent(name="calc", prompt="Compute 1 + 2", output=Answer, max_turns=1)


async def runs_of(llm: ScriptedLLM, settings: list[str], **escalate: Any) -> dict[str, Any]:
    first = await first_attempt(AGENT, {"llm": llm})
    return {name: step async for name, step in
            setting_runs(AGENT, first, settings, {"llm": llm}, escalate.get("to"))}  # fmt: skip


async def test_a_first_attempt_that_needs_no_correction_is_every_settings_run() -> None:
    runs = await runs_of(ScriptedLLM([GOOD]), ["same", "structured"])
    assert set(runs) == {f"{s}-r{n}" for s in ("same", "structured") for n in (0, 1, 2)}
    assert all(step.ok for step in runs.values())
    assert len({id(step) for step in runs.values()}) == 1


async def test_every_setting_resumes_the_same_failed_first_attempt() -> None:
    # One first attempt (BAD), then per setting: same repeats BAD then GOOD; structured GOOD.
    llm = ScriptedLLM([BAD, BAD, GOOD, GOOD])
    runs = await runs_of(llm, ["same", "structured"])
    assert len(llm.requests) == 4  # the first attempt once, then each setting's corrections
    first_messages = llm.requests[0].messages
    assert llm.requests[1].messages[: len(first_messages)] == first_messages
    assert [r.output is not None for r in llm.requests] == [False, False, False, True]
    same_r0, same_r1, same_r2 = (runs[f"same-r{n}"] for n in (0, 1, 2))
    assert same_r0.failure is not None and same_r0.failure.reason is FailReason.BUDGET_EXHAUSTED
    assert (len(same_r0.turns), same_r0.return_retries) == (1, 0)
    assert same_r1.failure is not None and len(same_r1.turns) == 2  # its one correction failed
    assert same_r2.ok and len(same_r2.turns) == 3
    assert runs["structured-r1"].ok and runs["structured-r2"].ok
    assert runs["structured-r2"].turns[1].output_mode == "json_schema"


async def test_quote_keeps_the_failed_attempt_quoted_inside_its_feedback() -> None:
    llm = ScriptedLLM([BAD, GOOD])
    first = await first_attempt(AGENT, {"llm": llm})
    assert first.state is not None and len(first.state.latest_failure) == 2
    state = quoted(first.state)
    (message,) = state.latest_failure
    assert state.context_policy == "quote" and message.role == "user"
    assert message.content.startswith("Your previous reply was:\n```\nthree\n```")
    step = await AGENT.resume(state, llm=llm)
    assert step.ok and [m.role for m in llm.requests[1].messages] == ["system", "user", "user"]


async def test_escalation_sends_the_corrections_to_the_other_model() -> None:
    small, large = ScriptedLLM([BAD], model_name="small"), ScriptedLLM([GOOD], model_name="large")
    first = await first_attempt(AGENT, {"llm": small})
    runs = {name: step async for name, step in
            setting_runs(AGENT, first, ["escalated"], {"llm": small}, large)}  # fmt: skip
    assert runs["escalated-r2"].ok
    assert [t.model for t in runs["escalated-r2"].turns] == ["small", "large"]


async def test_escalated_structured_sends_the_corrections_to_the_other_model_under_the_schema() -> (
    None
):
    small, large = ScriptedLLM([BAD], model_name="small"), ScriptedLLM([GOOD], model_name="large")
    first = await first_attempt(AGENT, {"llm": small})
    settings = ["escalated-structured"]
    runs = {name: step async for name, step in
            setting_runs(AGENT, first, settings, {"llm": small}, large)}  # fmt: skip
    assert runs["escalated-structured-r2"].ok
    (request,) = large.requests
    assert request.output is not None and request.output.mode == "json_schema"
    assert small.requests[0].output is None


async def test_the_first_attempt_and_same_are_free_text_whatever_the_librarys_default() -> None:
    llm = ScriptedLLM([BAD, BAD, GOOD])
    runs = await runs_of(llm, ["same"])
    assert runs["same-r2"].ok
    assert [request.output for request in llm.requests] == [None, None, None]


def test_the_variants_name_each_setting_at_each_budget_with_real_run_options() -> None:
    variants = variants_of(["same", "quote", "structured"])
    assert [v.name for v in variants][:4] == ["same-r0", "same-r1", "same-r2", "quote-r0"]
    assert variants[5].options == {
        "return_retries": 2, "context_policy": "quote", "correction": Correction(),
    }  # fmt: skip
    assert variants[0].options["correction"] == Correction()  # as the work turns, explicitly
    assert variants[8].options["correction"] == Correction(output="json_schema")
    AGENT.check_options(**variants[8].options, llm=ScriptedLLM([]))  # real options
    with pytest.raises(ValueError, match="--escalate-url"):
        setting_options("escalated")


def test_the_study_records_every_variant_of_a_case_once_and_resumes(
    server: Any, tmp_path: Any
) -> None:
    import json

    import correction_study
    from openai_server import Reply, completion

    # The first attempt and every correction are unreadable: each setting corrects twice.
    server.script(*[Reply.json(completion("not json at all"))] * 5)
    argv = ["--base-url", server.base_url, "--cases", "1", "--categories", "simple_python",
            "--settings", "same,structured", "--results", str(tmp_path)]  # fmt: skip
    correction_study.main(argv)
    out = tmp_path / "qwen" / "bfcl-contract.jsonl"
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["variant"] for r in records) == sorted(
        f"{s}-r{n}" for s in ("same", "structured") for n in (0, 1, 2)
    )
    bodies = [r.json for r in server.requests]
    assert [("response_format" in body) for body in bodies] == [False, False, False, True, True]
    correction_study.main(argv)  # every record there: nothing is run again
    assert len(server.requests) == 5
    assert len(out.read_text().splitlines()) == 6


def test_the_study_report_compares_settings_on_the_same_first_attempts() -> None:
    from correction_report import RESULTS, rows, table

    models = [path.name for path in RESULTS.iterdir() if (path / "tasks.jsonl").exists()]
    assert models, "no committed correction-study records"
    for model in models:
        settings = rows(model)
        assert [name for name, *_ in settings], model
        # r0 is the shared first attempt: the same success and calls under every setting
        first = {(r0.correct, r0.calls, r0.runs) for _, r0, _, _ in settings}
        assert len(first) == 1, (model, first)
        for name, r0, r1, r2 in settings:
            # a correction only adds: r1 and r2 never lose a case r0 got right
            assert r0.correct <= r1.correct <= r2.correct, name
            assert r1.salvaged <= r1.corrected
    assert table().count("\n") >= 2 + sum(len(rows(model)) for model in models)


def test_the_bfcl_rows_compare_every_answer_form_on_the_same_cases() -> None:
    from correction_report import BFCL_ROWS, bfcl_reports, bfcl_table

    reports = bfcl_reports("qwen1.5b")
    assert reports is not None, "no committed BFCL correction records for the 1.5B"
    cases = {
        variant: sorted(o.case for o in report.outcomes) for variant, report in reports.items()
    }
    assert len({tuple(names) for names in cases.values()}) == 1 and cases["same-r0"]
    r0, r1 = reports["same-r0"].variants[0], reports["same-r1"].variants[0]
    assert r0.correct <= r1.correct and r1.salvaged <= r1.corrected
    text = bfcl_table()
    assert all(f"(`{variant}`)" in text for _, variant, _ in BFCL_ROWS)


def rows_per_table(text: str) -> tuple[int, int]:
    """The cases a table's heading names and its rows, each row checked to count them all."""
    cases = 0
    rows = 0
    for line in text.splitlines():
        if " BFCL cases " in line:
            cases = int(line.split(", ")[1].split()[0])
        elif line.startswith("| ") and not line.startswith(("| system", "| ---")):
            per_category = [cell.strip() for cell in line.split("|")[6:-1]]
            assert sum(int(cell.split("/")[1]) for cell in per_category) == cases, line
            rows += 1
    return cases, rows


def test_the_peers_rows_compare_the_same_cases_on_one_server() -> None:
    from correction_report import PEER_ROWS, peers_table

    text = peers_table()
    assert text, "no committed records of the peers on the parsed set-up"
    assert all(f"(`{variant}`)" in text for variant, _ in PEER_ROWS)
    # every row of a model's table counts the same cases: the number its heading names
    cases, rows = rows_per_table(text)
    assert cases and rows % len(PEER_ROWS) == 0


@pytest.mark.parametrize("held_out", [False, True], ids=["fixed", "held-out"])
def test_the_headline_rows_compare_the_same_cases_and_count_the_disagreements(
    held_out: bool,
) -> None:
    import bfcl_report
    from correction_report import HEADLINE, RESULTS, _paired, headline_table

    text = headline_table(held_out=held_out)
    assert text, "no committed records of the 1.5B's headline rows"
    cases, rows = rows_per_table(text)
    # the held-out sample may leave out the raw call without the prompt, never the pair
    assert cases and 2 <= rows <= len(HEADLINE)
    pair = ("raw-prompted-lenient", "subagent-prompted-r1")
    assert all(f"(`{variant}@template`)" in text for variant in pair)
    # the disagreements, counted again from the graded records themselves
    folder = RESULTS.parent / ("bfcl-qwen1.5b-holdout" if held_out else "bfcl-qwen1.5b")
    reports = _paired(folder, [variant for variant, _ in HEADLINE if f"(`{variant}`)" in text])
    outcomes = bfcl_report.read(folder).outcomes
    right = {(o.variant, o.case): o.correct for o in outcomes}
    common = {o.case for o in reports["subagent-prompted-r1@template"].outcomes}
    ours = {c: right["subagent-prompted-r1@template", c] for c in common}
    prompted = {c: right["raw-prompted-lenient@template", c] for c in common}
    only_ours = sum(ours[c] and not prompted[c] for c in common)
    only_prompted = sum(prompted[c] and not ours[c] for c in common)
    assert f"is wrong: {only_ours}; the reverse: {only_prompted} " in text


def test_the_pages_tables_are_what_the_committed_records_give() -> None:
    from correction_report import PAGE, markers, tables, update_page

    content = PAGE.read_text(encoding="utf-8")
    written = tables()
    for name in written:
        start, end = markers(name)
        assert start in content and end in content, f"the page lacks the {name!r} table"
    assert update_page(content, written) == content, "run eval/correction_report.py --page"


def test_a_table_whose_end_marker_is_missing_is_an_error_naming_it() -> None:
    from correction_report import markers, update_page

    start, end = markers("peers")
    page = f"intro\n{start}\nold\n{end}\noutro\n"
    assert update_page(page, {"peers": "new"}) == f"intro\n{start}\nnew\n{end}\noutro\n"
    assert update_page(page, {"tasks": "new"}) == page  # no markers: left out
    with pytest.raises(ValueError, match="'peers'"):
        update_page(f"intro\n{start}\nold\n", {"peers": "new"})
