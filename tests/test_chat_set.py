"""The chat set (eval/chat.py): its cases, its judge, its variants, against a served model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import chat
import pytest
from openai_server import RecordedRequest, Reply, ScriptedServer, completion

from subagent.evals import Case, JudgeContext

pytestmark = pytest.mark.anyio


def judged(answer: str, expected: list[str]) -> bool:
    case: Case[Any] = Case(name="c", messages=[{"role": "user", "content": "q"}],
                           expected=expected)  # fmt: skip
    ctx: JudgeContext[Any] = JudgeContext(case=case, output=answer, step=None, variant="v")
    return chat.chat_judge(ctx).passed


def test_the_chat_set_is_twenty_odd_questions_each_with_its_right_answers() -> None:
    dataset = chat.load_chat()
    assert 20 <= len(dataset.cases) <= 25
    for case in dataset.cases:
        assert case.messages and case.messages[-1]["role"] == "user"
        assert case.expected and all(isinstance(words, str) for words in case.expected)
    assert sum(len(case.messages or []) > 1 for case in dataset.cases) >= 2  # follow-ups


def test_an_answer_is_right_when_it_holds_an_expected_word_whole_case_aside() -> None:
    assert judged("The capital is Paris.", ["Paris"])
    assert judged("it has EIGHT legs", ["8", "eight"])
    assert not judged("1440", ["144"])  # a number inside another is not it
    assert not judged('{"fail": "I cannot know"}', ["Paris"])


async def test_each_variant_runs_every_case_once_and_only_one_offers_the_fail(
    server: ScriptedServer, tmp_path: Path
) -> None:
    answers = {case.name: case.expected[0] for case in chat.load_chat().cases}  # type: ignore[index]
    questions = {case.messages[-1]["content"]: name  # type: ignore[index]
                 for name, case in ((c.name, c) for c in chat.load_chat().cases)}  # fmt: skip

    def reply(request: RecordedRequest) -> Reply:
        messages = request.json["messages"]
        if '{"fail"' in messages[0]["content"]:  # offered the fail: a small model takes it
            return Reply.json(completion('{"fail": "I cannot say"}'))
        return Reply.json(completion(f"It is {answers[questions[messages[-1]['content']]]}."))

    cases = len(answers)
    server.script(*[reply] * (cases * 2))
    out = tmp_path / "chat.jsonl"
    variants = [chat.VARIANTS["fail-line"], chat.VARIANTS["no-fail-line"]]
    report = await chat.evaluate(server.base_url, variants, out)
    assert report.variant("no-fail-line").correct == cases
    assert report.variant("fail-line").correct == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == cases * 2
    assert all(r["step"]["turns"][0]["messages_sent"] >= 2 for r in records)
    asked = len(server.requests)
    await chat.evaluate(server.base_url, variants, out)  # resumed: nothing is asked again
    assert len(server.requests) == asked


async def test_the_raw_control_sends_the_conversation_alone_and_is_judged_alike(
    server: ScriptedServer, tmp_path: Path
) -> None:
    cases = chat.load_chat().cases
    server.script(*[Reply.json(completion("Paris, I think."))] * len(cases))
    report = await chat.evaluate_raw(server.base_url, tmp_path / "raw.jsonl")
    assert report.variant("raw").runs == len(cases)
    assert report.variant("raw").correct == 1  # only the capital of France is Paris
    for request, case in zip(server.requests, cases, strict=True):
        assert request.json["messages"] == case.messages  # no system prompt
