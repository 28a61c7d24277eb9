"""subagent.evals._judges: the rubric judge (LLMJudge): its grade, its scale and threshold,
a case's own rubric, its tokens in the report, and what it refuses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from evals_models import Answer, CoinModel, adder

from subagent import ConfigurationError, LLMRequest, LLMResponse, ScriptedLLM, Usage
from subagent.evals import Case, Dataset, JudgeContext, LLMJudge, Report

pytestmark = pytest.mark.anyio


def grade(text: str, tokens: int = 50) -> LLMResponse:
    return LLMResponse(text=text, usage=Usage(input_tokens=tokens - 10, output_tokens=10))


def context(output: Any, case: Case[Any] | None = None) -> JudgeContext[Any]:
    return JudgeContext(case or Case(name="q", context={"q": "refund?"}), output, None, "v")


def task(model: ScriptedLLM, call: int = 0) -> str:
    return str(model.requests[call].messages[-1].content)


async def test_a_rubric_judge_passes_or_fails_by_the_models_grade_with_its_reason() -> None:
    model = ScriptedLLM([grade('{"reason": "polite and names the policy", "passed": true}')])
    judge = LLMJudge("The answer is polite", llm=model)
    verdict = await judge.judge(context("Sure: refunds within 30 days."))
    assert (verdict.passed, verdict.reason, verdict.score, verdict.tokens) == (
        True, "polite and names the policy", None, 50,
    )  # fmt: skip
    sent = task(model)
    assert "<rubric>\nThe answer is polite\n</rubric>" in sent
    assert "<output>\nSure: refunds within 30 days.\n</output>" in sent
    assert "<input>" not in sent and "<expected_output>" not in sent


async def test_the_input_and_expected_output_are_shown_only_when_asked() -> None:
    model = ScriptedLLM([grade('{"reason": "ok", "passed": true}')])
    judge = LLMJudge("Right", llm=model, include_input=True, include_expected=True)
    case = Case(name="sum", context={"a": 2, "b": 3}, expected=Answer(value=5))
    await judge.judge(context(Answer(value=5), case))
    sent = task(model)
    assert '<input>\n{"a": 2, "b": 3}\n</input>' in sent
    assert '<expected_output>\n{"value": 5}\n</expected_output>' in sent
    assert '<output>\n{"value": 5}\n</output>' in sent


async def test_a_score_on_a_scale_is_kept_between_0_and_1_and_the_threshold_decides() -> None:
    model = ScriptedLLM([grade('{"reason": "mostly", "passed": true, "score": 3}')] * 2)
    strict = LLMJudge("Complete", llm=model, scale=(1, 5), threshold=4)
    verdict = await strict.judge(context("half an answer"))
    assert (verdict.passed, verdict.score, verdict.reason) == (False, 0.5, "3 of 1-5: mostly")
    assert "Score it from 1" in task(model)
    lenient = LLMJudge("Complete", llm=model, scale=(1, 5))  # no threshold: the model's pass
    assert (await lenient.judge(context("half an answer"))).passed is True


async def test_a_score_off_the_scale_is_asked_again_and_both_calls_are_counted() -> None:
    model = ScriptedLLM([grade('{"reason": "great", "passed": true, "score": 9}'),
                         grade('{"reason": "great", "passed": true, "score": 5}')])  # fmt: skip
    verdict = await LLMJudge("Complete", llm=model, scale=(1, 5)).judge(context("x"))
    assert (verdict.score, verdict.tokens, len(model.requests)) == (1.0, 100, 2)


async def test_a_cases_own_rubric_takes_the_judges_place() -> None:
    model = ScriptedLLM([grade('{"reason": "ok", "passed": true}')] * 2)
    judge = LLMJudge("Default rubric", llm=model)
    own = Case(name="own", metadata={"rubric": "Mentions Paris"})
    await judge.judge(context("Paris", own))
    assert "Mentions Paris" in task(model, 0) and "Default rubric" not in task(model, 0)
    await judge.judge(context("Paris"))
    assert "Default rubric" in task(model, 1)
    with pytest.raises(ValueError, match="has no rubric"):
        await LLMJudge(llm=model).judge(context("Paris"))


async def test_its_tokens_are_the_judges_cost_in_the_report_and_the_records(
    tmp_path: Path,
) -> None:
    def grading(request: LLMRequest) -> LLMResponse:
        right = '{"value": 5}' in str(request.messages[-1].content)
        return grade(json.dumps({"reason": "checked", "passed": right, "score": 4 if right else 1}))

    judge = LLMJudge("The sum is right", llm=ScriptedLLM([grading] * 2), scale=(0, 4),
                     threshold=3, name="rubric")  # fmt: skip
    cases = [Case(name="right", context={"a": 2, "b": 3}),
             Case(name="wrong", context={"a": 2, "b": 4})]  # fmt: skip
    out = tmp_path / "runs.jsonl"
    report = await Dataset(cases, [judge]).evaluate(adder, llm=CoinModel(first=1.0), out=out,
                                                    concurrency=1)  # fmt: skip
    result = report.variant("default").judges["rubric"]
    assert (result.judged, result.passed, result.mean_score, result.tokens) == (2, 1, 0.625, 100)
    assert "| default | rubric | 2 | 1 (50%) | 0.625 | 100 |" in report.to_markdown()
    assert Report.read(out).variant("default").judges["rubric"] == result


async def test_a_grading_run_that_fails_is_an_error_of_the_judge() -> None:
    dataset = Dataset([Case(name="one", context={"a": 1, "b": 2})],
                      [LLMJudge("Right", llm=ScriptedLLM(["no json", "still none"]))])  # fmt: skip
    report = await dataset.evaluate(adder, llm=CoinModel(first=1.0))
    assert report.variant("default").judge_errors == 1


def test_bad_scales_thresholds_and_rubrics_are_refused_naming_them() -> None:
    model = ScriptedLLM()
    for arguments, field in [
        ({"scale": (5, 1)}, "scale"),
        ({"scale": (1, 2, 3)}, "scale"),
        ({"threshold": 3}, "threshold"),
        ({"scale": (1, 5), "threshold": 6}, "threshold"),
        ({"rubric": ""}, "rubric"),
        ({"llm": None}, "llm"),
    ]:
        given = {"rubric": "Right", "llm": model, **arguments}
        with pytest.raises(ConfigurationError, match=field):
            LLMJudge(**given)
    with pytest.raises(TypeError, match="did you mean 'return_retries'"):  # as a run's are
        LLMJudge("Right", llm=model, retries=1)


def test_a_rubric_judge_named_by_a_model_spec_travels_in_a_dataset_file(tmp_path: Path) -> None:
    judge = LLMJudge("Polite", llm="openai:gpt-4o-mini@http://127.0.0.1:9/v1", scale=(1, 5),
                     threshold=4, include_input=True)  # fmt: skip
    Dataset([Case(name="one")], [judge]).to_file(tmp_path / "d.jsonl")
    (again,) = Dataset.from_file(tmp_path / "d.jsonl").judges
    assert isinstance(again, LLMJudge)
    assert (again.rubric, again.scale, again.threshold, again.include_input) == (
        "Polite", (1, 5), 4, True,
    )  # fmt: skip
    in_code = LLMJudge("Polite", llm=ScriptedLLM())
    assert in_code.spec() is None  # a model object stays in code
