"""subagent.evals._spans: a case run's spans captured for the judges that read them, passed
on unchanged to the evaluation's own tracer provider, and nothing made without such a judge."""

from __future__ import annotations

from typing import Any

import pytest
from evals_models import Answer
from support import Traced

from subagent import LLMRequest, LLMResponse, ScriptedLLM, SubAgent, ToolCall
from subagent.evals import (
    CapturedSpan,
    Case,
    Dataset,
    HasMatchingSpan,
    JudgeContext,
    System,
    SystemRun,
    judge,
)
from subagent.evals._spans import MAX_SPANS, SpanRecorder

pytestmark = pytest.mark.anyio


def lookup(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


weather = SubAgent(name="weather", prompt="Weather in {{city}}?", output=Answer, max_turns=3,
                   tools=[lookup])  # fmt: skip


def tool_then_answer(request: LLMRequest) -> LLMResponse:
    """Calls ``lookup`` until a tool's result is in the conversation, then answers."""
    if any(message.role == "tool" for message in request.messages):
        return LLMResponse(text='{"value": 1}')
    return LLMResponse(tool_calls=[ToolCall(name="lookup", arguments={"city": "Oslo"})])


def calling(*, tool: bool, runs: int = 1) -> ScriptedLLM:
    """A model that calls ``lookup`` first when ``tool``, then answers, ``runs`` times."""
    return ScriptedLLM([tool_then_answer] * (2 * runs) if tool else ['{"value": 1}'] * runs)


CASE = Case(name="oslo", context={"city": "Oslo"})


async def test_a_judge_of_spans_sees_the_tools_the_run_called_and_its_turns() -> None:
    called = HasMatchingSpan("execute_tool lookup", judge_name="looked up")
    never = HasMatchingSpan(attributes={"gen_ai.tool.name": "lookup"}, at_most=0,
                            judge_name="never looked up")  # fmt: skip
    turns = HasMatchingSpan(name_contains="agent_turn", at_least=2, at_most=2,
                            judge_name="two turns")  # fmt: skip
    dataset = Dataset([CASE], [called, never, turns])
    with_tool = await dataset.evaluate(weather, llm=calling(tool=True))
    verdicts = {name: j.passed for name, j in with_tool.variant("default").judges.items()}
    assert verdicts == {"looked up": 1, "never looked up": 0, "two turns": 1}
    without = await dataset.evaluate(weather, llm=calling(tool=False))
    verdicts = {name: j.passed for name, j in without.variant("default").judges.items()}
    assert verdicts == {"looked up": 0, "never looked up": 1, "two turns": 0}


async def test_the_spans_a_judge_sees_are_the_runs_own_with_their_parents(tmp_path: Any) -> None:
    seen: list[tuple[CapturedSpan, ...] | None] = []

    @judge(name="spans", spans=True)
    def keep(ctx: JudgeContext[Answer]) -> bool:
        seen.append(ctx.spans)
        return True

    await Dataset([CASE, Case(name="bergen", context={"city": "Bergen"})], [keep]).evaluate(
        weather, llm=calling(tool=True, runs=2), concurrency=2
    )
    assert len(seen) == 2
    for spans in seen:
        assert spans is not None
        names = [span.name for span in spans]
        assert names[0] == "invoke_agent weather" and spans[0].parent is None
        assert names.count("agent_turn normal") == 2 and names.count("execute_tool lookup") == 1
        tool = spans[names.index("execute_tool lookup")]
        assert tool.parent is not None and spans[tool.parent].name == "agent_turn normal"
        assert tool.attributes["gen_ai.tool.name"] == "lookup"
        assert all(span.duration_s is not None and not span.error for span in spans)


async def test_without_a_judge_of_spans_a_run_is_given_no_recorder() -> None:
    providers: list[object] = []

    @judge
    def plain(ctx: JudgeContext[Answer]) -> bool:
        return ctx.spans is None

    class Seeing(SubAgent[Answer]):
        async def run(self, *args: Any, **options: Any) -> Any:  # type: ignore[override]
            providers.append(options.get("tracer_provider"))
            return await super().run(*args, **options)

    agent = Seeing(name="weather", prompt="Weather in {{city}}?", output=Answer, tools=[lookup])
    report = await Dataset([CASE], [plain]).evaluate(agent, llm=calling(tool=False))
    assert providers == [None] and report.variant("default").correct == 1


async def test_captured_spans_still_reach_the_evaluations_tracer_in_their_place() -> None:
    traced = Traced()
    dataset = Dataset([CASE], [HasMatchingSpan("execute_tool lookup")], name="weather")
    report = await dataset.evaluate(weather, llm=calling(tool=True),
                                    tracer_provider=traced.provider)  # fmt: skip
    assert report.variant("default").correct == 1
    root = traced.one("eval_case weather")
    run = traced.one("invoke_agent weather")
    assert run.parent is not None and run.parent.span_id == root.context.span_id
    tool = traced.one("execute_tool lookup")
    turns = {span.context.span_id for span in traced.named("agent_turn normal")}
    assert tool.parent is not None and tool.parent.span_id in turns
    assert {span.context.trace_id for span in traced.spans} == {root.context.trace_id}
    (event,) = root.events
    assert event.attributes is not None
    assert event.attributes["gen_ai.evaluation.name"] == "has_matching_span"


async def test_a_judge_of_spans_on_a_run_without_them_is_an_error_of_the_judge() -> None:
    async def by_hand(case: Case[Any]) -> SystemRun:
        return SystemRun(output={"value": 1})

    report = await Dataset([CASE], [HasMatchingSpan("execute_tool lookup")]).evaluate(
        System(by_hand)
    )
    assert report.variant("default").judge_errors == 1


def test_a_recorder_keeps_a_bounded_number_of_spans() -> None:
    recorder = SpanRecorder()
    tracer = recorder.get_tracer("test")
    for _ in range(MAX_SPANS + 3):
        tracer.start_span("many").end()
    assert len(recorder.spans()) == MAX_SPANS and recorder.dropped == 3


def test_a_span_judge_with_nothing_to_match_or_bad_counts_is_refused() -> None:
    from subagent import ConfigurationError

    with pytest.raises(ConfigurationError, match="name, a part of it, or its attributes"):
        HasMatchingSpan()
    with pytest.raises(ConfigurationError, match="at_most"):
        HasMatchingSpan("chat x", at_least=2, at_most=1)


def test_a_span_judge_travels_in_a_dataset_file(tmp_path: Any) -> None:
    judge_ = HasMatchingSpan(attributes={"gen_ai.tool.name": "lookup"}, at_most=0,
                             judge_name="no lookup")  # fmt: skip
    Dataset([CASE], [judge_]).to_file(tmp_path / "d.jsonl")
    (again,) = Dataset.from_file(tmp_path / "d.jsonl").judges
    assert isinstance(again, HasMatchingSpan)
    assert (again.name, again.attributes, again.at_most) == ("no lookup", judge_.attributes, 0)
