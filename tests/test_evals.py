"""subagent.evals: cases, datasets and their files, judges, variants, the resumable runner,
the report and its reproduction from the records, traces."""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from evals_models import Answer, CoinModel, adder, sums
from support import Traced, run_example, set_capture

from subagent import (
    ConfigurationError,
    LLMRequest,
    LLMResponse,
    Price,
    ReplyPolicy,
    ScriptedLLM,
    Step,
    SubAgent,
    ToolCall,
    Usage,
    UsageLimits,
)
from subagent.evals import (
    AgentJudge,
    AgentVerdict,
    Case,
    Dataset,
    EqualsExpected,
    FieldsMatch,
    Judge,
    JudgeContext,
    Report,
    System,
    SystemReply,
    SystemRun,
    Variant,
    Verdict,
    grid,
    judge,
)
from subagent.evals._outcomes import outcome_from_data
from subagent.evals._variants import plan_variants
from subagent.llm import LLMSpec

pytestmark = pytest.mark.anyio

BUDGETS = {"r0": {"return_retries": 0}, "r1": {"return_retries": 1}}


def timeless(report: Report) -> dict[str, Any]:
    """A report's data without its wall times (two runs of the same cases differ in those)."""
    data = report.to_data()
    for variant in data["variants"]:
        for key in [key for key in variant if key.startswith("wall_")]:
            del variant[key]
    return data


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# --- the runs and the report ---


async def test_each_variant_runs_every_case_and_is_reported_apart() -> None:
    model = CoinModel(first=0.5, fix=1.0)
    report = await sums(40).evaluate(adder, BUDGETS, llm=model)
    r0, r1 = report.variant("r0"), report.variant("r1")
    assert (r0.runs, r1.runs) == (40, 40)
    # The same first answers under both budgets: r1's corrections all land.
    assert r1.correct == r0.correct + r1.corrected
    assert r1.salvaged == r1.corrected == 40 - r0.correct > 0
    assert r1.salvage_rate == 1.0 and r0.salvage_rate is None
    assert r1.calls == 40 + r1.corrected and r0.calls == 40
    assert r0.failed == {"budget_exhausted": 40 - r0.correct}
    assert model.calls == r0.calls + r1.calls
    low, high = r1.success_interval
    assert low < r1.success_rate == 1.0 == high


async def test_valid_but_wrong_runs_are_valid_and_not_correct() -> None:
    report = await sums(30).evaluate(adder, llm=CoinModel(first=1.0, wrong=0.5))
    result = report.variant("default")
    assert result.valid == 30
    assert 0 < result.valid_but_wrong == 30 - result.correct


async def test_without_judges_a_valid_run_is_correct() -> None:
    dataset = Dataset([Case(name=f"c{n}", context={"a": n, "b": 1}) for n in range(10)])
    report = await dataset.evaluate(adder, llm=CoinModel(first=0.5, wrong=1.0))
    result = report.variant("default")
    assert result.correct == result.valid > 0


async def test_corrections_that_repeat_the_failed_reply_are_counted_whitespace_aside() -> None:
    budget = {"r2": {"return_retries": 2}}
    never = await sums(10).evaluate(adder, budget, llm=CoinModel(first=0.0, fix=0.0, respace=True))
    result = never.variant("r2")
    assert result.correction_turns == 20
    assert result.repeated_corrections == 20 and result.repeat_rate == 1.0
    fixed = await sums(10).evaluate(adder, budget, llm=CoinModel(first=0.0, fix=1.0))
    assert fixed.variant("r2").repeated_corrections == 0


def test_a_turns_own_repeated_flag_is_read_when_it_has_one() -> None:
    def record(repeated: bool | None) -> dict[str, Any]:
        turns = [{"type": "must_return", "reply": "a"}, {"type": "retry", "reply": "a"}]
        if repeated is not None:
            turns[1]["repeated"] = repeated
        step = {
            "turns": turns,
            "failure": None,
            "usage": {"total": {"input_tokens": 1, "output_tokens": 1}},
            "duration_s": 0.1,
        }
        return {"case": "c", "case_digest": "d", "variant": "v", "correct": True, "step": step}

    assert outcome_from_data(record(None)).repeated_corrections == 1  # computed
    assert outcome_from_data(record(False)).repeated_corrections == 0  # the loop's flag
    assert outcome_from_data(record(True)).repeated_corrections == 1


async def test_the_tokens_of_agents_run_as_tools_count_as_steps_usage_does(
    tmp_path: Path,
) -> None:
    def reply(text: str, tokens: int) -> LLMResponse:
        return LLMResponse(text=text, usage=Usage(input_tokens=tokens, output_tokens=1))

    child = SubAgent(
        name="child",
        prompt="Add {{a}} and {{b}}",
        output=Answer,
        max_turns=1,
        llm=ScriptedLLM([reply('{"value": 3}', 7)]),
    )
    parent = SubAgent(
        name="boss",
        prompt="Solve {{a}} + {{b}}",
        output=Answer,
        max_turns=2,
        tools=[child.as_tool()],
    )
    call = ToolCall(name="child", arguments={"a": "1", "b": "2"})
    llm = ScriptedLLM(
        [LLMResponse(tool_calls=[call], usage=Usage(input_tokens=100)), reply('{"value": 3}', 200)]
    )
    out = tmp_path / "records.jsonl"
    dataset = Dataset([Case(name="one", context={"a": 1, "b": 2})])
    report = await dataset.evaluate(parent, out=out, llm=llm)
    step = Step[Answer].model_validate(lines(out)[0]["step"])
    assert (
        (report.variant("default").prompt_tokens, report.variant("default").completion_tokens)
        == (
            step.usage.total.input_tokens,
            step.usage.total.output_tokens,
        )
        == (307, 2)
    )
    assert Report.read(out).to_data() == report.to_data()


async def test_cost_comes_from_the_price_of_the_variants_model() -> None:
    cheap, dear = CoinModel(model_name="cheap"), CoinModel(model_name="dear")
    prices = {"cheap": Price(1.0, 2.0), "dear": Price(10.0, 20.0)}
    variants = {"cheap": {"llm": cheap}, "dear": {"llm": dear}}
    report = await sums(5).evaluate(adder, variants, prices=prices)
    one_call = (100 * 1.0 + 5 * 2.0) / 1e6
    assert report.variant("cheap").cost == pytest.approx(one_call * report.variant("cheap").calls)
    assert report.variant("dear").cost == pytest.approx(10 * report.variant("cheap").cost)
    assert report.measure == "cost"
    assert report.variant("cheap").model == "cheap"


async def test_an_unpriced_model_leaves_the_cost_unknown_and_tokens_measure_it() -> None:
    report = await sums(5).evaluate(adder, prices={"other": Price(1.0, 1.0)}, llm=CoinModel())
    assert report.variant("default").cost is None
    assert report.measure == "tokens"


async def test_cases_may_give_messages_instead_of_a_context() -> None:
    agent = SubAgent(name="chat", output=Answer, max_turns=1)
    dataset = Dataset(
        [
            Case(
                name="m",
                messages=[{"role": "user", "content": "What is 2 + 3?"}],
                expected={"value": 5},
            )
        ],
        [EqualsExpected()],
    )
    report = await dataset.evaluate(agent, llm=CoinModel(first=1.0))
    assert report.variant("default").correct == 1


async def test_repeat_runs_each_case_several_times() -> None:
    report = await sums(4).evaluate(adder, repeat=3, llm=CoinModel(first=1.0))
    assert report.variant("default").runs == 12
    assert sorted({(c.case, c.repeat) for c in report.cases()}) == [
        (f"sum-{n}", r) for n in range(4) for r in range(3)
    ]


async def test_a_variant_may_change_the_agents_definition() -> None:
    variants = {"asked": {}, "told": {"prompt": "Add {{a}} and {{b}}; answer as JSON."}}
    model = ScriptedLLM([lambda r: LLMResponse(text='{"value": 0}')] * 2)
    dataset = Dataset([Case(name="only", context={"a": 1, "b": 2})])
    await dataset.evaluate(adder, variants, llm=model, concurrency=1)
    tasks = [str(request.messages[1].content) for request in model.requests]
    assert any("What is 1 + 2?" in task for task in tasks)
    assert any("Add 1 and 2; answer as JSON." in task for task in tasks)


async def test_a_run_that_raises_is_a_failed_run_with_the_variants_budgets() -> None:
    model = ScriptedLLM([])  # no reply: the run raises ScriptExhaustedError
    report = await sums(1).evaluate(adder, {"r2": {"return_retries": 2}}, llm=model)
    assert report.variant("r2").failed == {"error": 1}


async def test_the_report_says_which_variants_got_each_case_right() -> None:
    report = await sums(20).evaluate(adder, BUDGETS, llm=CoinModel(first=0.5, fix=1.0))
    cases = report.cases()
    assert len(cases) == 20
    assert all(c.correct["r1"] for c in cases)
    split = [c.case for c in cases if not c.correct["r0"]]
    assert split and all(name in report.to_markdown() for name in split[:20])


# --- judges ---


def judged(output: object, expected: object) -> JudgeContext[Any]:
    return JudgeContext(Case(name="c", expected=expected), output, None, "v")  # type: ignore[arg-type]


async def test_contains_looks_in_text_lists_and_objects() -> None:
    from subagent.evals import Contains

    assert (await Contains("Paris").judge(judged("It is Paris.", None))).passed
    assert not (await Contains("paris").judge(judged("It is Paris.", None))).passed
    assert (
        await Contains("paris", case_sensitive=False).judge(judged("It is Paris.", None))
    ).passed
    assert (await Contains().judge(judged([1, 2, 3], 2))).passed  # the expected output
    assert (await Contains({"value": 3}).judge(judged(Answer(value=3), None))).passed
    verdict = await Contains({"value": 4}).judge(judged(Answer(value=3), None))
    assert not verdict.passed and verdict.reason == '{"value": 3} does not contain {"value": 4}'


async def test_is_instance_and_max_duration_judge_the_type_and_the_wall_time() -> None:
    from subagent import ScriptedLLM
    from subagent.evals import IsInstance, MaxDuration

    assert (await IsInstance("Answer").judge(judged(Answer(value=3), None))).passed
    assert (await IsInstance("BaseModel").judge(judged(Answer(value=3), None))).passed
    wrong = await IsInstance("str").judge(judged(Answer(value=3), None))
    assert not wrong.passed and wrong.reason == "a Answer, not a str"
    step = await adder.run({"a": 1, "b": 2}, llm=ScriptedLLM(['{"value": 3}']))
    ctx = JudgeContext(Case(name="c"), step.output, step, "v")
    assert (await MaxDuration(60).judge(ctx)).passed
    slow = step.model_copy(update={"duration_s": 61.0})
    late = await MaxDuration(60).judge(JudgeContext(Case(name="c"), slow.output, slow, "v"))
    assert not late.passed and late.reason == "took 61 s, more than 60 s"
    with pytest.raises(ConfigurationError):
        MaxDuration(0)


def test_the_new_built_in_judges_travel_in_a_dataset_file(tmp_path: Any) -> None:
    from subagent.evals import Contains, IsInstance, MaxDuration

    judges = [Contains("x", case_sensitive=False), IsInstance("Answer"), MaxDuration(2.5)]
    path = Dataset(sums(1).cases, judges, name="s").to_file(tmp_path / "s.jsonl")
    again = Dataset.from_file(path).judges
    assert [j.spec() for j in again] == [j.spec() for j in judges]


async def test_equals_expected_compares_json_forms() -> None:
    assert (await EqualsExpected().judge(judged(Answer(value=3), {"value": 3}))).passed
    verdict = await EqualsExpected().judge(judged(Answer(value=4), {"value": 3}))
    assert not verdict.passed and verdict.reason == 'expected {"value": 3}, got {"value": 4}'


async def test_fields_match_names_the_fields_that_differ_and_scores_the_rest() -> None:
    class Person(Answer):
        name: str
        city: str

    output = Person(value=1, name="Ana", city="Porto")
    verdict = await FieldsMatch().judge(judged(output, {"name": "Ana", "city": "Lisbon"}))
    assert not verdict.passed and verdict.score == 0.5
    assert verdict.reason == '1 of 2 fields differ: city (expected "Lisbon", got "Porto")'
    only_name = await FieldsMatch(["name"]).judge(judged(output, {"name": "Ana", "city": "x"}))
    assert only_name.passed and only_name.score == 1.0


async def test_functions_sync_or_async_are_judges() -> None:
    def small(ctx: JudgeContext[Answer]) -> bool:
        return ctx.output.value < 10

    @judge(name="even")
    async def even(ctx: JudgeContext[Answer]) -> tuple[bool, str]:
        return (
            ctx.output.value % 2 == 0,
            f"{ctx.output.value} is {'' if ctx.output.value % 2 == 0 else 'not '}even",
        )

    dataset = Dataset(
        [Case(name=f"c{n}", context={"a": n, "b": 0}) for n in range(12)], [small, even]
    )
    report = await dataset.evaluate(adder, llm=CoinModel(first=1.0), out=None)
    result = report.variant("default")
    assert result.correct == len([n for n in range(12) if n < 10 and n % 2 == 0])
    assert result.valid_but_wrong == 12 - result.correct


async def test_a_judge_that_raises_is_an_error_of_the_judge_not_of_the_run(tmp_path: Path) -> None:
    def broken(ctx: JudgeContext[Answer]) -> bool:
        raise RuntimeError("the judge has a bug")

    def odd_answer(ctx: JudgeContext[Answer]) -> object:
        return "yes"

    out = tmp_path / "records.jsonl"
    dataset = Dataset(sums(2).cases, [EqualsExpected(), broken, odd_answer])
    report = await dataset.evaluate(adder, llm=CoinModel(first=1.0), out=out)
    result = report.variant("default")
    assert (result.valid, result.correct, result.judge_errors, result.failed) == (2, 0, 2, {})
    verdicts = lines(out)[0]["verdicts"]
    assert [v["judge"] for v in verdicts] == ["equals_expected", "broken", "odd_answer"]
    assert verdicts[0] == {
        "judge": "equals_expected",
        "passed": True,
        "reason": None,
        "score": None,
        "error": None,
    }
    assert verdicts[1]["error"] == "RuntimeError: the judge has a bug"
    assert "returned 'yes'" in verdicts[2]["error"]
    assert "Runs a judge raised on (not counted correct): default 2" in report.to_markdown()


async def test_an_agent_is_a_judge_with_a_typed_verdict() -> None:
    referee = SubAgent(
        name="referee",
        output=AgentVerdict,
        max_turns=1,
        prompt="Is {{output}} the sum asked in {{input}}? Expected: {{expected}}",
    )

    def referee_reply(request: LLMRequest) -> LLMResponse:
        task = str(request.messages[1].content)
        right = '"value": 5' in task.split("Is ", 1)[1].split(" the sum", 1)[0]
        return LLMResponse(text=json.dumps({"passed": right, "reason": "checked the sum"}),
                           usage=Usage(input_tokens=90, output_tokens=10))  # fmt: skip

    judge_model = ScriptedLLM([referee_reply] * 2)
    dataset = Dataset(
        [
            Case(name="right", context={"a": 2, "b": 3}),
            Case(name="wrong", context={"a": 2, "b": 4}),
        ],
        [AgentJudge(referee, llm=judge_model)],
    )
    report = await dataset.evaluate(adder, llm=CoinModel(first=1.0), concurrency=1)
    assert {c.case: c.correct["default"] for c in report.cases()} == {"right": True, "wrong": False}
    assert "Expected:\n" in str(judge_model.requests[0].messages[1].content)  # none expected
    # what judging itself cost: 2 verdicts of 100 tokens each, in the report
    assert report.variant("default").judges["referee"].tokens == 200
    assert "| default | referee | 2 | 1 (50%) | - | 200 |" in report.to_markdown()


async def test_a_judging_agent_that_fails_is_an_error_of_the_judge() -> None:
    referee = SubAgent(name="referee", prompt="Judge {{output}}", output=AgentVerdict, max_turns=1)
    dataset = Dataset(sums(1).cases, [AgentJudge(referee, llm=ScriptedLLM(["not json"]))])
    report = await dataset.evaluate(adder, llm=CoinModel(first=1.0))
    assert report.variant("default").judge_errors == 1


def test_bad_judges_and_cases_are_refused_naming_them() -> None:
    with pytest.raises(ConfigurationError, match="no built-in judge 'equal'"):
        Dataset(sums(1).cases, ["equal"])
    with pytest.raises(ConfigurationError, match="two judges are named 'equals_expected'"):
        Dataset(sums(1).cases, [EqualsExpected(), "equals_expected"])
    with pytest.raises(ConfigurationError, match="two cases are named 'a'"):
        Dataset([Case(name="a"), Case(name="a")])
    with pytest.raises(ConfigurationError, match="non-empty name"):
        Case(name=" ")


# --- variants ---


def test_grid_spans_every_combination_named_after_its_values() -> None:
    model = CoinModel(model_name="small")
    variants = grid(return_retries=[0, 1], llm=[model])
    assert [v.name for v in variants] == [
        "return_retries=0, llm=small",
        "return_retries=1, llm=small",
    ]
    assert variants[1].options == {"return_retries": 1, "llm": model}


async def test_variant_options_must_be_run_options_or_agent_fields() -> None:
    model = CoinModel()
    with pytest.raises(
        ConfigurationError, match=r"variant 'x': 'retries' is not a run option .*'return_retries'"
    ):
        await sums(2).evaluate(adder, [Variant("x", {"retries": 1})], llm=model)
    with pytest.raises(ConfigurationError, match=r"each case gives its own \(Case.messages\)"):
        await sums(2).evaluate(adder, {"x": {"messages": []}}, llm=model)
    assert model.calls == 0


def test_a_model_named_by_a_string_is_made_once_per_variant_and_named() -> None:
    plans = plan_variants(adder, {"v": {"llm": "openai:gpt-x@http://127.0.0.1:9/v1"}}, {})
    assert isinstance(plans[0].options["llm"], LLMSpec)
    assert plans[0].model == "gpt-x"
    assert plans[0].described == {"llm": "openai:gpt-x@http://127.0.0.1:9/v1"}


async def test_invalid_variants_are_refused_before_any_run() -> None:
    model = CoinModel()
    with pytest.raises(ConfigurationError, match="variant 'bad': must be an integer >= 0"):
        await sums(2).evaluate(adder, {"good": {}, "bad": {"return_retries": -1}}, llm=model)
    with pytest.raises(ConfigurationError, match="two variants are named 'a'"):
        await sums(2).evaluate(adder, [Variant("a"), Variant("a")], llm=model)
    assert model.calls == 0


# --- records, resuming, reproducing ---


async def test_each_run_is_one_record_line_with_its_step(tmp_path: Path) -> None:
    out = tmp_path / "records.jsonl"
    await sums(3).evaluate(adder, BUDGETS, out=out, llm=CoinModel(first=0.0, fix=1.0))
    records = lines(out)
    assert len(records) == 6
    first = records[0]
    assert set(first) == {
        "dataset",
        "variant_index",
        "case_index",
        "case",
        "case_digest",
        "tags",
        "repeat",
        "variant",
        "variant_digest",
        "agent",
        "options",
        "model",
        "cost",
        "correct",
        "verdicts",
        "step",
    }
    assert first["dataset"] == "sums" and first["model"] == "coin" and first["agent"] == "adder"
    assert {(r["variant"], r["options"]["return_retries"]) for r in records} == {
        ("r0", 0),
        ("r1", 1),
    }


async def test_a_killed_evaluation_resumes_with_only_the_missing_runs(tmp_path: Path) -> None:
    out = tmp_path / "records.jsonl"
    whole = await sums(10).evaluate(
        adder, BUDGETS, out=tmp_path / "whole.jsonl", llm=CoinModel(first=0.5, fix=1.0)
    )
    text = (tmp_path / "whole.jsonl").read_text()
    kept = text.splitlines(keepends=True)[:7]
    out.write_text("".join(kept) + '{"case": "sum-9", "cut sh')  # killed mid-line
    model = CoinModel(first=0.5, fix=1.0)
    resumed = await sums(10).evaluate(adder, BUDGETS, out=out, llm=model)
    assert len(lines(out)) == 20  # the cut line is gone, every run recorded once
    assert model.calls == sum(len(record["step"]["turns"]) for record in lines(out)[7:])
    assert timeless(resumed) == timeless(whole)
    again = CoinModel()
    await sums(10).evaluate(adder, BUDGETS, out=out, llm=again)
    assert again.calls == 0  # nothing left to run


async def test_an_edited_case_runs_again_and_its_new_record_counts(tmp_path: Path) -> None:
    out = tmp_path / "records.jsonl"
    await sums(3).evaluate(adder, out=out, llm=CoinModel(first=1.0))
    edited = Dataset(
        [*sums(2).cases, Case(name="sum-2", context={"a": 2, "b": 4}, expected=Answer(value=7))],
        [EqualsExpected()],
    )
    model = CoinModel(first=1.0)
    report = await edited.evaluate(adder, out=out, llm=model)
    assert model.calls == 1
    assert len(lines(out)) == 4
    assert {c.case: c.correct["default"] for c in report.cases()} == {
        "sum-0": True,
        "sum-1": True,
        "sum-2": False,
    }


async def test_a_variant_with_other_options_or_another_model_runs_again(tmp_path: Path) -> None:
    out = tmp_path / "records.jsonl"
    await sums(2).evaluate(adder, {"v": {"return_retries": 0}}, out=out, llm=CoinModel())
    changed = CoinModel()
    await sums(2).evaluate(adder, {"v": {"return_retries": 1}}, out=out, llm=changed)
    assert changed.calls >= 2
    other_model = CoinModel(model_name="other")
    await sums(2).evaluate(adder, {"v": {"return_retries": 1}}, out=out, llm=other_model)
    assert other_model.calls >= 2
    same = CoinModel(model_name="other")
    await sums(2).evaluate(adder, {"v": {"return_retries": 1}}, out=out, llm=same)
    assert same.calls == 0


async def test_every_number_of_the_report_comes_back_from_the_records_alone(tmp_path: Path) -> None:
    out = tmp_path / "records.jsonl"
    dataset = Dataset(sums(30).cases, [EqualsExpected(), FieldsMatch()], name="sums")
    variants = grid(return_retries=[0, 1, 2])
    model = CoinModel(first=0.4, fix=0.5, wrong=0.2, respace=True)
    live = await dataset.evaluate(adder, variants, prices=Price(1, 2), llm=model, concurrency=3)
    recorded = await dataset.evaluate(
        adder,
        variants,
        out=out,
        prices=Price(1, 2),
        llm=CoinModel(first=0.4, fix=0.5, wrong=0.2, respace=True),
    )
    assert Report.read(out).to_data() == recorded.to_data()
    assert Report.read(out).to_markdown() == recorded.to_markdown()
    assert timeless(recorded) == timeless(live)  # without a file: counted the same
    # Counted again here, by hand, from the lines of the file:
    for result in recorded.variants:
        mine = [r for r in lines(out) if r["variant"] == result.variant]
        steps = [r["step"] for r in mine]
        corrected = [r for r in mine if any(t["type"] == "retry" for t in r["step"]["turns"])]
        assert result.runs == len(mine)
        assert result.correct == sum(r["correct"] for r in mine)
        assert result.valid == sum(s["failure"] is None for s in steps)
        assert (result.corrected, result.salvaged) == (
            len(corrected),
            sum(r["correct"] for r in corrected),
        )
        assert result.calls == sum(len(s["turns"]) for s in steps)
        usages = [Step[Answer].model_validate(s).usage.total for s in steps]  # read back
        assert result.prompt_tokens == sum(usage.input_tokens for usage in usages)
        assert result.completion_tokens == sum(usage.output_tokens for usage in usages)
        assert result.cost == pytest.approx(sum(r["cost"] for r in mine))
        assert result.wall_s == pytest.approx(sum(s["duration_s"] for s in steps))


def test_a_records_line_that_is_not_a_record_is_named(tmp_path: Path) -> None:
    out = tmp_path / "records.jsonl"
    out.write_text('{"case": "a"}\n')
    with pytest.raises(ConfigurationError, match=r"records.jsonl:1: not an evaluation record"):
        Report.read(out)


async def test_the_evaluations_usage_limit_leaves_the_rest_for_a_resume(tmp_path: Path) -> None:
    out = tmp_path / "records.jsonl"
    limits = UsageLimits(max_total_tokens=105 * 5)  # five calls' worth
    report = await sums(12).evaluate(
        adder, out=out, batch_limits=limits, concurrency=1, llm=CoinModel(first=1.0)
    )
    assert report.variant("default").runs == 5 and report.pending == 7
    assert len(lines(out)) == 5
    resumed = await sums(12).evaluate(adder, out=out, llm=CoinModel(first=1.0))
    assert resumed.variant("default").runs == 12 and resumed.pending == 0


# --- agents per case, systems that are not agents, runs made elsewhere ---


def two_agents() -> tuple[dict[str, SubAgent[Answer]], Dataset[Answer]]:
    """An adder and a doubler, and cases naming one or the other."""
    doubler = SubAgent(name="doubler", prompt="Double {{a}} and add {{b}}.", output=Answer,
                       max_turns=1)  # fmt: skip
    cases = [
        Case(name=f"add-{n}", context={"a": n, "b": 1}, expected=Answer(value=n + 1),
             agent="adder")
        for n in range(3)
    ] + [
        Case(name=f"double-{n}", context={"a": n, "b": 0}, expected=Answer(value=2 * n),
             agent="doubler")
        for n in range(2)
    ]  # fmt: skip
    return {"adder": adder, "doubler": doubler}, Dataset(cases, [EqualsExpected()], name="two")


def answering(request: LLMRequest) -> LLMResponse:
    """Adds, or doubles and adds, as the task asks; right the first time."""
    task = str(request.messages[1].content)
    a, b = (int(n) for n in re.findall(r"\d+", task)[:2])
    return LLMResponse(text=json.dumps({"value": 2 * a + b if "Double" in task else a + b}))


async def test_cases_name_their_agent_and_each_runs_with_its_own(tmp_path: Path) -> None:
    agents, dataset = two_agents()
    out = tmp_path / "records.jsonl"
    model = ScriptedLLM([answering] * 20)
    report = await dataset.evaluate(agents, BUDGETS, out=out, llm=model, concurrency=1)
    assert {v.variant: (v.runs, v.correct) for v in report.variants} == {
        "r0": (5, 5),
        "r1": (5, 5),
    }
    assert {(r["case"], r["agent"]) for r in lines(out)} == {
        *((f"add-{n}", "adder") for n in range(3)),
        *((f"double-{n}", "doubler") for n in range(2)),
    }
    again = ScriptedLLM([])
    await dataset.evaluate(agents, BUDGETS, out=out, llm=again)
    assert again.requests == []  # every run recorded: nothing made again
    assert Report.read(out).to_data() == report.to_data()


async def test_a_case_naming_an_agent_the_evaluation_lacks_is_refused_before_any_run() -> None:
    agents, dataset = two_agents()
    model = CoinModel()
    with pytest.raises(ConfigurationError, match="case 'double-0' names agent 'doubler'; the "
                       "agents are: adder"):  # fmt: skip
        await dataset.evaluate({"adder": adder}, llm=model)
    with pytest.raises(ConfigurationError, match="case 'double-0' names agent 'doubler', but "
                       "the evaluation runs agent 'adder'"):  # fmt: skip
        await dataset.evaluate(adder, llm=model)
    with pytest.raises(ConfigurationError, match="case 'sum-0' names no agent"):
        await sums(1).evaluate(agents, llm=model)
    with pytest.raises(ConfigurationError, match="agent 'adder': must be a SubAgent"):
        await dataset.evaluate({"adder": "adder", "doubler": adder}, llm=model)  # type: ignore[dict-item]
    assert model.calls == 0


async def test_a_function_of_the_case_makes_the_agent_of_each_run(tmp_path: Path) -> None:
    made: list[str] = []

    def agent_for(case: Case[Any]) -> SubAgent[Answer]:
        made.append(case.name)
        # what the agent says depends on the case: its own prompt
        prompt = "What is {{a}} + {{b}}? (" + case.name + ")"
        return SubAgent(name=f"for-{case.name}", prompt=prompt, output=Answer, max_turns=1)

    out = tmp_path / "records.jsonl"
    model = CoinModel(first=1.0)
    report = await sums(3).evaluate(agent_for, BUDGETS, out=out, llm=model, concurrency=1)
    assert report.variant("r1").correct == 3
    # the options checked on the first case's agent, then one agent per run
    assert made == ["sum-0"] + [name for name in ("sum-0", "sum-1", "sum-2") for _ in BUDGETS]
    assert [r["agent"] for r in lines(out)][:2] == ["for-sum-0", "for-sum-0"]
    made.clear()
    again = CoinModel()
    await sums(3).evaluate(agent_for, BUDGETS, out=out, llm=again)
    assert again.calls == 0 and made == ["sum-0"]  # recorded: only the options' check
    with pytest.raises(ConfigurationError, match=r"variant 'bad': .*'retries' is not a run option"):
        await sums(3).evaluate(agent_for, {"bad": {"retries": 1}}, llm=again)
    with pytest.raises(ConfigurationError, match="the agent made for case 'sum-0' is not a"):
        await sums(3).evaluate(lambda case: "adder", llm=again)
    assert again.calls == 0


async def add_by_hand(case: Case[Any], *, off: int = 0, fail: bool = False) -> SystemRun:
    """A system that is not an agent: answers the adder's cases itself, in two replies."""
    if fail:
        raise RuntimeError("the server is down")
    total = case.context["a"] + case.context["b"] + off
    replies = [
        SystemReply(text="many", error="not a number"),  # refused: the next is a correction
        SystemReply(text=json.dumps({"value": total}), stop_reason="stop"),
    ]
    return SystemRun(output={"value": total}, replies=replies, input_tokens=30, output_tokens=4)


async def test_a_system_that_is_not_an_agent_is_judged_recorded_and_reported(
    tmp_path: Path,
) -> None:
    out = tmp_path / "records.jsonl"
    variants = {"right": {}, "off by one": {"off": 1}, "down": {"fail": True}}
    report = await sums(4).evaluate(System(add_by_hand), variants, out=out)
    right, off, down = (report.variant(name) for name in variants)
    assert (right.runs, right.correct, right.calls, right.prompt_tokens) == (4, 4, 8, 120)
    assert (right.corrected, right.salvaged, right.correction_turns) == (4, 4, 4)
    assert right.repeated_corrections == 0 and right.stop_reasons == {"stop": 4}
    assert (off.valid, off.correct, off.valid_but_wrong) == (4, 0, 4)
    assert (down.valid, down.correct, down.failed) == (0, 0, {"error": 4})
    records = lines(out)
    assert {tuple(sorted(set(r) & {"run", "step"})) for r in records} == {("run",)}
    assert records[0]["agent"].endswith("add_by_hand")
    failed = next(r for r in records if r["variant"] == "down")
    assert failed["run"]["failure"] == "error"
    assert failed["run"]["message"] == "RuntimeError: the server is down"
    assert failed["verdicts"] == []  # a failed run is never judged
    assert Report.read(out).to_data() == report.to_data()
    again = await sums(4).evaluate(System(add_by_hand), variants, out=out)
    assert again.to_data() == report.to_data()  # recorded: nothing made again


async def test_a_systems_options_are_its_functions_keyword_arguments() -> None:
    with pytest.raises(ConfigurationError, match=r"variant 'x': system .*add_by_hand' does not "
                       "take it: got an unexpected keyword argument 'offset'"):  # fmt: skip
        await sums(1).evaluate(System(add_by_hand), {"x": {"offset": 1}})
    with pytest.raises(ConfigurationError, match="a system needs a name"):
        System(add_by_hand, name=" ")
    named = System(functools.partial(add_by_hand, off=2))
    assert named.name == f"{__name__}.add_by_hand"


async def test_runs_made_elsewhere_are_judged_recorded_and_not_made_again(tmp_path: Path) -> None:
    out = tmp_path / "records.jsonl"
    elsewhere = await sums(3).evaluate(adder, BUDGETS, llm=CoinModel(first=0.0, fix=1.0))
    steps = {}
    for case in sums(3).cases:  # the same runs, made outside the evaluation
        for name, options in BUDGETS.items():
            steps[(case.name, name)] = await adder.run(
                case.context, llm=CoinModel(first=0.0, fix=1.0), **options
            )
    runs = [(case, variant, step) for (case, variant), step in steps.items()]
    written = await sums(3).import_runs(adder, BUDGETS, runs, out=out, llm=CoinModel())
    assert written == 6
    assert await sums(3).import_runs(adder, BUDGETS, runs, out=out, llm=CoinModel()) == 0
    model = CoinModel()
    report = await sums(3).evaluate(adder, BUDGETS, out=out, llm=model)
    assert model.calls == 0  # the imported runs are the evaluation's
    assert timeless(report) == timeless(elsewhere)
    summary = SystemRun(output={"value": 0}, replies=[SystemReply(text='{"value": 0}')])
    await sums(1).import_runs(adder, BUDGETS, [("sum-0", "r0", summary)], out=tmp_path / "s.jsonl",
                              llm=CoinModel())  # fmt: skip
    (record,) = lines(tmp_path / "s.jsonl")
    assert record["correct"] is True and record["run"]["output"] == {"value": 0}
    with pytest.raises(ConfigurationError, match="no case 'sum-9'"):
        await sums(1).import_runs(adder, BUDGETS, [("sum-9", "r0", summary)], out=out, llm=model)
    with pytest.raises(ConfigurationError, match="case 'sum-0': no variant 'r7'"):
        await sums(1).import_runs(adder, BUDGETS, [("sum-0", "r7", summary)], out=out, llm=model)


async def test_pending_counts_the_runs_an_evaluation_has_still_to_make(tmp_path: Path) -> None:
    out = tmp_path / "records.jsonl"
    model = CoinModel(first=1.0)
    assert sums(4).pending(adder, BUDGETS, out=out, llm=model) == 8
    await sums(3).evaluate(adder, BUDGETS, out=out, llm=model)
    calls = model.calls
    assert sums(4).pending(adder, BUDGETS, out=out, llm=model) == 2
    assert sums(4).pending(adder, BUDGETS, out=out, llm=model, repeat=2) == 10
    assert model.calls == calls  # nothing ran
    with pytest.raises(ConfigurationError, match="variant 'bad'"):
        sums(4).pending(adder, {"bad": {"retries": 1}}, out=out, llm=model)


async def test_a_report_read_for_the_cases_as_they_are_leaves_the_others_out(
    tmp_path: Path,
) -> None:
    out = tmp_path / "records.jsonl"
    await sums(4).evaluate(adder, out=out, llm=CoinModel(first=1.0))
    edited = Case(name="sum-1", context={"a": 1, "b": 5}, expected=Answer(value=6))
    now = [*sums(1).cases, edited, *sums(1, start=3).cases]  # sum-2 removed, sum-1 edited
    report = Report.read(out, cases=now)
    assert sorted(o.case for o in report.outcomes) == ["sum-0", "sum-3"]
    assert Report.read(out).variant("default").runs == 4


async def test_corrections_are_retry_turns_and_a_systems_replies_after_a_refused_one() -> None:
    two_turns = SubAgent(name="adder", prompt="What is {{a}} + {{b}}?", output=Answer,
                         max_turns=2, return_retries=1)  # fmt: skip
    # refused in the normal turn, right in the next (a work turn): no correction ran
    fixed_by_work = await sums(5, start=1).evaluate(two_turns,
                                                    llm=CoinModel(first=0.0, fix=1.0))  # fmt: skip
    result = fixed_by_work.variant("default")
    assert (result.correct, result.corrected, result.correction_turns) == (5, 0, 0)
    # refused in both work turns: the retry turn is the correction, and repeats the refusal
    never = await sums(5, start=1).evaluate(two_turns, llm=CoinModel(first=0.0, fix=0.0))
    result = never.variant("default")
    assert (result.corrected, result.correction_turns, result.repeated_corrections) == (5, 5, 5)

    def system(replies: list[dict[str, Any]]) -> Any:
        record = {"case": "c", "case_digest": "d", "variant": "v", "correct": True,
                  "run": {"replies": replies}}  # fmt: skip
        return outcome_from_data(record)

    refused = {"text": "x", "error": "not a number"}
    assert system([refused, {"text": "1"}]).corrected  # after a refused reply
    assert not system([{"text": "x"}, {"text": "1"}]).corrected  # nothing was refused
    said_so = system([{"text": "x"}, {"text": "x", "correction": True}])
    assert (said_so.corrected, said_so.repeated_corrections) == (True, 1)
    assert not system([refused, {"text": "1", "correction": False}]).corrected


def test_a_repeated_correction_repeats_the_calls_as_well_as_the_text() -> None:
    def call(x: int) -> dict[str, Any]:
        return {"id": f"c{x}", "name": "f", "arguments": {"x": x}}

    def record(first: list[dict[str, Any]], second: list[dict[str, Any]]) -> dict[str, Any]:
        turns = [
            {"type": "must_return", "reply": "", "tool_calls": first, "outcome": "error"},
            {"type": "retry", "reply": " ", "tool_calls": second, "outcome": "error"},
        ]
        step = {"turns": turns, "failure": {"reason": "budget_exhausted"}, "duration_s": 0.1}
        return {"case": "c", "case_digest": "d", "variant": "v", "correct": False, "step": step}

    assert outcome_from_data(record([call(1)], [call(2)])).repeated_corrections == 0
    again = {**call(1), "id": "other"}  # the same call under another id
    assert outcome_from_data(record([call(1)], [again])).repeated_corrections == 1


async def test_the_report_of_a_tag_counts_only_its_cases_runs() -> None:
    cases = [Case(name=f"sum-{n}", context={"a": n, "b": 2 * n}, expected=Answer(value=3 * n),
                  tags=("even" if n % 2 == 0 else "odd", "all")) for n in range(6)]  # fmt: skip
    report = await Dataset(cases, [EqualsExpected()]).evaluate(adder, BUDGETS, llm=CoinModel())
    assert report.tags() == ["even", "all", "odd"]
    even = report.tagged("even")
    assert [v.runs for v in even.variants] == [3, 3]
    assert {o.case for o in even.outcomes} == {"sum-0", "sum-2", "sum-4"}
    assert report.tagged("even", "odd").to_data() == report.tagged("all").to_data()
    assert report.tagged("none").variants == []


async def test_a_case_whose_metadata_changed_runs_again(tmp_path: Path) -> None:
    out = tmp_path / "records.jsonl"
    case = Case(name="one", context={"a": 1, "b": 2}, metadata={"judge": "strict"})
    await Dataset([case]).evaluate(adder, out=out, llm=CoinModel(first=1.0))
    edited = Case(name="one", context={"a": 1, "b": 2}, metadata={"judge": "lenient"})
    assert edited.digest != case.digest
    assert Case(name="x", context={"a": 1}).digest == Case(name="x", context={"a": 1},
                                                           metadata={}).digest  # fmt: skip
    model = CoinModel(first=1.0)
    await Dataset([edited]).evaluate(adder, out=out, llm=model)
    assert model.calls == 1


# --- dataset files ---


@pytest.mark.parametrize("suffix", [".jsonl", ".yaml"])
def test_a_dataset_round_trips_through_its_file(tmp_path: Path, suffix: str) -> None:
    dataset = Dataset(
        [
            Case(name="a", context={"a": 1, "b": 2}, expected=Answer(value=3), tags=("easy",)),
            Case(
                name="m",
                messages=[{"role": "user", "content": "hi"}],
                metadata={"k": [1]},
                agent="chat",
            ),
        ],
        [EqualsExpected(), FieldsMatch(["value"]), lambda ctx: True],
        name="mine",
    )
    path = dataset.to_file(tmp_path / f"cases{suffix}")
    back = Dataset.from_file(path)
    assert back.name == "mine"
    assert [j.spec() for j in back.judges] == [
        "equals_expected",
        {"fields_match": {"fields": ["value"]}},
    ]
    assert [c.digest for c in back.cases] == [c.digest for c in dataset.cases]
    assert back.cases[0].tags == ("easy",) and back.cases[1].metadata == {"k": [1]}
    assert (back.cases[0].agent, back.cases[1].agent) == (None, "chat")


def test_a_bad_dataset_line_is_named_with_its_field(tmp_path: Path) -> None:
    path = tmp_path / "cases.jsonl"
    path.write_text('{"name": "a"}\n{"name": "b", "contxt": {}}\n')
    with pytest.raises(ConfigurationError, match=r"cases.jsonl:2: not a case: contxt: Extra"):
        Dataset.from_file(path)
    path.write_text('{"name": "a"}\n{"name": \n')
    with pytest.raises(ConfigurationError, match=r"cases.jsonl:2: not JSON"):
        Dataset.from_file(path)
    with pytest.raises(ConfigurationError, match=r"\.jsonl or \.yaml, not '\.csv'"):
        Dataset.from_file(tmp_path / "cases.csv")


# --- traces ---


async def test_each_case_run_is_a_trace_with_its_verdicts(monkeypatch: pytest.MonkeyPatch) -> None:
    set_capture(monkeypatch, False)
    traced = Traced()
    dataset = Dataset(sums(2).cases, [EqualsExpected()], name="sums")
    await dataset.evaluate(
        adder, BUDGETS, tracer_provider=traced.provider, llm=CoinModel(first=1.0, wrong=1.0)
    )
    cases = traced.named("eval_case sums")
    assert len(cases) == 4
    assert all(span.parent is None for span in cases)  # each its own trace
    assert len({span.context.trace_id for span in cases}) == 4
    by_name = {
        (s.attributes["subagent.eval.case"], s.attributes["subagent.eval.variant"]): s
        for s in cases
    }
    span = by_name[("sum-1", "r1")]
    assert span.attributes["subagent.eval.correct"] is False
    (event,) = span.events
    assert event.name == "gen_ai.evaluation.result"
    assert dict(event.attributes) == {
        "gen_ai.evaluation.name": "equals_expected",
        "gen_ai.evaluation.score.value": 0.0,
        "gen_ai.evaluation.score.label": "fail",
    }
    runs = traced.named("invoke_agent adder")
    assert {run.parent.span_id for run in runs} == {s.context.span_id for s in cases}


async def test_a_verdicts_reason_reaches_the_trace_only_when_content_is_captured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    set_capture(monkeypatch, True)
    traced = Traced()
    await sums(1, start=1).evaluate(
        adder, tracer_provider=traced.provider, llm=CoinModel(first=1.0, wrong=1.0)
    )
    (event,) = traced.one("eval_case sums").events
    assert event.attributes["gen_ai.evaluation.explanation"] == (
        'expected {"value": 3}, got {"value": 4}'
    )


def test_the_public_objects_show_as_subagent_evals() -> None:
    import subagent.evals as evals

    shown = {getattr(evals, name).__module__ for name in evals.__all__}
    assert shown == {"subagent.evals"}


# --- the documentation and the example ---


def test_the_first_evaluation_of_the_docs_fits_in_fifteen_lines() -> None:
    page = (Path(__file__).resolve().parent.parent / "docs" / "evals.md").read_text()
    block = page.split("## A first evaluation", 1)[1].split("```python\n", 2)[2].split("```", 1)[0]
    assert len(block.strip().splitlines()) <= 15, block


def test_the_example_recommends_a_budget_and_reproduces_its_report() -> None:
    out = run_example("evals_budgets.py")
    assert "**Recommended:** return_retries=1: " in out
    assert "return_retries=2 adds " in out and "no significant success" in out
    assert "run again: 0 calls made, the same report: True" in out
    assert "the report from the records alone: the same" in out
    assert "Significant regression (alpha 0.05, Holm): return_retries=1 success" in out


async def test_a_cancelled_evaluation_keeps_whole_lines_and_resumes(tmp_path: Path) -> None:
    out = tmp_path / "records.jsonl"

    class Cancelling(CoinModel):  # the same model class both times: the same variant
        cancel_at: int | None = None

        async def complete(self, request: LLMRequest) -> LLMResponse:
            if self.calls == self.cancel_at:
                scope.cancel()  # the caller gives up mid-evaluation
            return await super().complete(request)

    giving_up = Cancelling(first=1.0)
    giving_up.cancel_at = 6
    with anyio.CancelScope() as scope:
        await sums(20).evaluate(adder, out=out, concurrency=2, llm=giving_up)
    kept = lines(out)  # every line whole
    assert 0 < len(kept) < 20
    model = Cancelling(first=1.0)
    report = await sums(20).evaluate(adder, out=out, llm=model)
    assert model.calls == 20 - len(kept)
    assert report.variant("default").runs == 20


async def test_bad_arguments_to_evaluate_are_named() -> None:
    with pytest.raises(ConfigurationError, match="agent: must be a SubAgent"):
        await sums(1).evaluate("adder", llm=CoinModel())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="repeat: must be an integer >= 1"):
        await sums(1).evaluate(adder, repeat=0, llm=CoinModel())
    with pytest.raises(ConfigurationError, match="messages belong to cases"):
        await sums(1).evaluate(adder, llm=CoinModel(), messages="hi")


# --- optional engines ---


async def test_the_plot_draws_success_against_cost(tmp_path: Path) -> None:
    report = await sums(10).evaluate(adder, BUDGETS, llm=CoinModel(first=0.5, fix=1.0))
    path = report.plot(tmp_path / "success.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


async def test_without_matplotlib_or_pyyaml_the_message_says_how_to_get_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = await sums(2).evaluate(adder, llm=CoinModel())
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "yaml", None)
    with pytest.raises(ImportError, match=r"pip install 'subagent-runtime\[evals\]'"):
        report.plot(tmp_path / "success.png")
    with pytest.raises(ImportError, match=r"YAML datasets need PyYAML"):
        sums(2).to_file(tmp_path / "cases.yaml")
    sums(2).to_file(tmp_path / "cases.jsonl")  # JSON Lines need nothing


def test_importing_the_evaluations_imports_neither_matplotlib_nor_pyyaml() -> None:
    code = (
        "import sys, subagent.evals, subagent.cli; "
        "print('matplotlib' in sys.modules, 'yaml' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.split() == ["False", "False"]


def with_allow_fail(agent: SubAgent[Any], allow_fail: bool) -> SubAgent[Any]:
    return dataclasses.replace(agent, reply_policy=ReplyPolicy(allow_fail=allow_fail))


def test_a_field_added_later_keeps_the_digest_where_it_changes_nothing() -> None:
    from pydantic import BaseModel as Model

    from subagent.evals._variants import _agent_digest

    class Out(Model):
        value: int

    typed = SubAgent(name="a", prompt="p", output=Out)
    offered = with_allow_fail(typed, True)
    # Offered the fail, it runs as every typed agent did before the field: the digest of
    # this agent at 439499d, so records made then stay its records.
    assert _agent_digest(offered) == "8239ae260c1c48d7"
    # Not offered (today's default, and False) it runs otherwise: a new digest.
    assert _agent_digest(typed) != _agent_digest(offered)
    text = SubAgent(name="a", prompt="p")
    assert _agent_digest(text) != _agent_digest(with_allow_fail(text, True))


async def test_a_run_whose_model_cannot_be_reached_is_a_crash_and_blocks_the_recommendation(
    tmp_path: Any,
) -> None:
    from subagent import ErrorKind, FunctionLLM, LLMError, RetryPolicy

    def unreachable(request: Any) -> str:
        raise LLMError(ErrorKind.CONNECTION, "ConnectError: refused (at http://127.0.0.1:9/v1)")

    report = await sums(3).evaluate(
        adder, {"a": {}, "b": {"return_retries": 1}}, llm=FunctionLLM(unreachable),
        retry_policy=RetryPolicy(max_attempts=1),
    )  # fmt: skip
    assert report.crashed == 6 and report.recommend() is None
    result = report.variant("a")
    assert result.crash_kinds == {"llm_error: connection": 3}
    assert result.crash_sample is not None and "127.0.0.1:9" in result.crash_sample
    assert "never ran to a result" in report.to_markdown()


async def test_the_report_names_each_judge_and_the_cases_every_variant_got_wrong() -> None:
    from subagent.evals import FunctionJudge

    def small(ctx: Any) -> tuple[bool, str] | bool:
        return ctx.output.value < 30  # wrong for large sums, whatever the variant

    dataset = sums(6, start=5)  # sums of 15, 18, ... 30: the last one fails `small`
    dataset = dataset.__class__(dataset.cases, [*dataset.judges, FunctionJudge(small)],
                                name=dataset.name)  # fmt: skip
    report = await dataset.evaluate(adder, {"r0": {"return_retries": 0},
                                            "r1": {"return_retries": 1}},
                                    llm=CoinModel(first=1.0, fix=1.0))  # fmt: skip
    judges = report.variant("r1").judges
    assert set(judges) == {"equals_expected", "small"}
    assert (judges["small"].judged, judges["small"].passed) == (6, 5)
    assert judges["equals_expected"].pass_rate == 1.0 and judges["small"].mean_score is None
    text = report.to_markdown()
    assert "| r1 | small | 6 | 5 (83%) | - |" in text
    wrong = [c.case for c in report.cases() if not any(c.correct.values())]
    assert len(wrong) == 1 and f"Cases every variant got wrong (1): {wrong[0]}." in text


# --- files an attacker or a bug wrote: bounded, refused by name ---


def test_a_yaml_dataset_with_aliases_is_refused_before_anything_expands(tmp_path: Path) -> None:
    pytest.importorskip("yaml")
    laughs = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    laughs += [f"{chr(98 + n)}: &{chr(98 + n)} [*{chr(97 + n)}" + f",*{chr(97 + n)}" * 8 + "]"
               for n in range(8)]  # fmt: skip
    path = tmp_path / "laughs.yaml"
    path.write_text("\n".join(laughs) + "\ncases:\n  - name: x\n    context: {q: *i}\n")
    assert path.stat().st_size < 1024
    with pytest.raises(ConfigurationError, match="may not use aliases") as refused:
        Dataset.from_file(path)
    assert str(path) in str(refused.value)


@pytest.mark.parametrize(
    ("suffix", "text"),
    [(".jsonl", '{"name": "x", "context": {"q": ' + "[" * 5000 + "]" * 5000 + "}}\n"),
     (".yaml", "cases:\n  - name: x\n    context: {q: " + "[" * 20000 + "]" * 20000 + "}\n")],
)  # fmt: skip
def test_a_dataset_nested_too_deeply_is_refused_naming_the_file(
    tmp_path: Path, suffix: str, text: str
) -> None:
    if suffix == ".yaml":
        pytest.importorskip("yaml")
    path = tmp_path / f"deep{suffix}"
    path.write_text(text)
    with pytest.raises(ConfigurationError, match="nested too deeply") as refused:
        Dataset.from_file(path)
    assert str(path) in str(refused.value)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda line: line.replace('"cost": null', '"cost": NaN'), "NaN"),
        (lambda line: line.replace('"cost": null', '"cost": -1.5'), "cost must be a number >= 0"),
        (lambda line: re.sub(r'"duration_s": ?[0-9.e-]+', '"duration_s":Infinity', line, count=1),
         "Infinity"),
        (lambda line: re.sub(r'"input_tokens": ?\d+', '"input_tokens":-7', line, count=1),
         "usage.input_tokens must be a number >= 0"),
    ],
    ids=["nan-cost", "negative-cost", "infinite-duration", "negative-tokens"],
)  # fmt: skip
async def test_a_record_with_a_count_no_run_made_is_refused_naming_file_and_line(
    tmp_path: Path, change: Callable[[str], str], named: str
) -> None:
    out = tmp_path / "records.jsonl"
    await sums(2).evaluate(adder, out=out, llm=CoinModel(first=1.0))
    first, second = out.read_text().splitlines()
    out.write_text(f"{first}\n{change(second)}\n")
    assert change(second) != second
    with pytest.raises(ConfigurationError, match=r"records\.jsonl:2: not an evaluation") as e:
        Report.read(out)
    assert named in str(e.value)


class Hangs(Judge):
    """A judge whose verdict never comes (its service never answers)."""

    name = "hangs"
    timeout = 0.05

    async def judge(self, ctx: JudgeContext[Any]) -> Verdict:
        await anyio.Event().wait()
        raise AssertionError("never reached")


async def test_a_judge_that_hangs_is_an_error_after_its_timeout_and_the_evaluation_goes_on(
    tmp_path: Path,
) -> None:
    dataset = Dataset(sums(3).cases, [Hangs(), EqualsExpected()], name="sums")
    report = await dataset.evaluate(adder, llm=CoinModel(first=1.0), out=tmp_path / "r.jsonl")
    assert report.variant("default").runs == 3
    records = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    hung = [v for record in records for v in record["verdicts"] if v["judge"] == "hangs"]
    assert [v["error"] for v in hung] == ["timed out after 0.05 s"] * 3
    assert all(not v["passed"] for v in hung)
