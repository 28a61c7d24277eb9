"""subagent.observe._metrics: GenAI metrics and subagent's counters from ScriptedLLM runs.

Each test installs an SDK meter provider with an in-memory reader as the global one (the
``metered`` fixture) and reads back what runs recorded: names, units, attributes, values.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from support import CALC, Answer, Metered, Traced, attrs, set_semconv

from subagent import (
    ErrorKind,
    FailReason,
    LLMError,
    LLMRequest,
    LLMResponse,
    ScriptedLLM,
    Step,
    SubAgent,
    ToolCall,
    ToolSourceLostError,
    Usage,
)
from subagent.observe import observer_for_run
from subagent.observe._metrics import (
    AGENT_DURATION,
    CORRECTIONS,
    INFERENCE_DURATION,
    INVOCATION_DURATION,
    OPERATION_DURATION,
    RUNS,
    TOKEN_USAGE,
    TOOL_DURATION,
    TURNS,
    USAGE_CACHE_READ_TOKENS,
    USAGE_CACHE_WRITE_TOKENS,
    USAGE_INPUT_TOKENS,
    USAGE_OUTPUT_TOKENS,
    metrics_observer,
)
from subagent.observe._observer import NO_OBSERVER

pytestmark = pytest.mark.anyio

CHAT = {
    "gen_ai.operation.name": "chat",
    "gen_ai.provider.name": "scripted",
    "gen_ai.request.model": "scripted",
}
# Every attribute key a metric may carry: no ids, no content.
ALLOWED_KEYS = {
    "gen_ai.operation.name", "gen_ai.provider.name", "gen_ai.request.model",
    "gen_ai.token.type", "gen_ai.agent.name", "gen_ai.tool.name",
    "gen_ai.tool.type", "server.address", "server.port", "error.type", "subagent.outcome",
    "subagent.failure.reason", "subagent.turn.type", "subagent.turn.outcome",
    "subagent.turn.repeated",
}  # fmt: skip


def key(**attributes: Any) -> frozenset[tuple[str, Any]]:
    return frozenset(attributes.items())


def dotted(**attributes: Any) -> dict[str, Any]:
    """``gen_ai__agent__name=...`` spelled as ``gen_ai.agent.name``."""
    return {name.replace("__", "."): value for name, value in attributes.items()}


def counts(metered: Metered, name: str) -> dict[frozenset[tuple[str, Any]], int]:
    return {attributes: point.value for attributes, point in metered.points(name).items()}


def failed_run(agent: str, reason: str) -> frozenset[tuple[str, Any]]:
    """The attributes of a failed run of ``agent`` in the runs counter."""
    return key(**dotted(gen_ai__agent__name=agent, subagent__outcome="failed",
                        subagent__failure__reason=reason))  # fmt: skip


def usage_reply(text: str, input_tokens: int, output_tokens: int) -> LLMResponse:
    return LLMResponse(
        text=text, usage=Usage(input_tokens=input_tokens, output_tokens=output_tokens),
        model="scripted-2026",
    )  # fmt: skip


async def test_no_meter_provider_means_no_metrics_observer() -> None:
    assert metrics_observer("calc", ScriptedLLM([])) is None
    assert observer_for_run("calc", ScriptedLLM([]), None, None, None) is NO_OBSERVER


async def test_a_corrected_run_records_tokens_durations_turns_and_corrections(
    metered: Metered,
) -> None:
    llm = ScriptedLLM(
        [usage_reply('{"value": "three"}', 100, 7), usage_reply('{"value": 3}', 130, 5)]
    )
    agent = SubAgent(name="s1", prompt="Compute {{question}}", output=Answer)
    step = await agent.run({"question": "1+2"}, llm=llm, max_turns=1, return_retries=2)
    assert step.ok and len(step.turns) == 2

    found = metered.collect()
    assert {name: found[name].unit for name in found} == {
        TOKEN_USAGE: "{token}", OPERATION_DURATION: "s", AGENT_DURATION: "s",
        RUNS: "{run}", TURNS: "{turn}", CORRECTIONS: "{turn}",
    }  # fmt: skip

    tokens = metered.points(TOKEN_USAGE)
    response = CHAT  # the reply's model ("scripted-2026") is not an attribute
    assert set(tokens) == {
        key(**response, **{"gen_ai.token.type": "input"}),
        key(**response, **{"gen_ai.token.type": "output"}),
    }
    inputs = tokens[key(**response, **{"gen_ai.token.type": "input"})]
    outputs = tokens[key(**response, **{"gen_ai.token.type": "output"})]
    assert (inputs.count, inputs.sum, inputs.min, inputs.max) == (2, 230, 100, 130)
    assert (outputs.count, outputs.sum) == (2, 12)
    assert list(inputs.explicit_bounds) == [4**power for power in range(14)]

    (calls,) = metered.points(OPERATION_DURATION).items()
    assert calls[0] == key(**response)
    assert calls[1].count == 2 and calls[1].sum >= 0
    assert list(calls[1].explicit_bounds)[:2] == [0.01, 0.02]

    (run,) = metered.points(AGENT_DURATION).items()
    assert run[0] == key(
        **dotted(gen_ai__operation__name="invoke_agent", gen_ai__agent__name="s1",
                 gen_ai__request__model="scripted")
    )  # fmt: skip
    assert run[1].count == 1
    # The run took at least as long as its two calls.
    assert run[1].sum >= calls[1].sum
    assert list(run[1].explicit_bounds)[:2] == [0.1, 0.2]

    assert counts(metered, TURNS) == {
        key(**dotted(gen_ai__agent__name="s1", subagent__turn__type="must_return",
                     subagent__turn__outcome="error", error__type="invalid_output")): 1,
        key(**dotted(gen_ai__agent__name="s1", subagent__turn__type="retry",
                     subagent__turn__outcome="success")): 1,
    }  # fmt: skip
    assert counts(metered, CORRECTIONS) == {
        key(
            **dotted(
                gen_ai__agent__name="s1",
                subagent__turn__outcome="success",
                subagent__turn__repeated=False,
            )
        ): 1
    }
    assert counts(metered, RUNS) == {
        key(**dotted(gen_ai__agent__name="s1", subagent__outcome="done")): 1
    }


async def test_an_exhausted_run_counts_as_failed_with_its_reason(metered: Metered) -> None:
    llm = ScriptedLLM(["no json", "still none", "nothing"])
    agent = SubAgent(name="s1", prompt="Compute {{question}}", output=Answer)
    step = await agent.run({"question": "1+2"}, llm=llm, max_turns=1, return_retries=2)
    assert step.failure is not None and step.failure.reason is FailReason.BUDGET_EXHAUSTED

    assert counts(metered, RUNS) == {failed_run("s1", "budget_exhausted"): 1}
    (run_key,) = metered.points(AGENT_DURATION)
    assert dict(run_key)["error.type"] == "budget_exhausted"
    assert counts(metered, CORRECTIONS) == {
        key(
            **dotted(
                gen_ai__agent__name="s1",
                subagent__turn__outcome="error",
                subagent__turn__repeated=False,
            )
        ): 2
    }
    turns = counts(metered, TURNS)
    assert sum(turns.values()) == 3
    assert all(dict(k)["error.type"] == "invalid_output" for k in turns)


async def test_tool_calls_record_durations_by_tool_and_never_a_made_up_name(
    metered: Metered,
) -> None:
    def boom(x: int) -> int:
        """Always fails."""
        raise ValueError(f"secret {x}")

    agent = SubAgent(name="calc", prompt="Compute {{question}}", output=Answer,
                     tools=[CALC.tools[0], boom])  # fmt: skip
    llm = ScriptedLLM(
        [
            LLMResponse(tool_calls=[ToolCall(name="add", arguments={"a": 1, "b": 2}),
                                    ToolCall(name="boom", arguments={"x": 1}),
                                    ToolCall(name="made_up_by_the_model", arguments={})]),
            '{"value": 3}',
        ]
    )  # fmt: skip
    step = await agent.run({"question": "1+2"}, llm=llm, max_turns=2)
    assert step.ok

    tool = dotted(gen_ai__operation__name="execute_tool", gen_ai__agent__name="calc",
                  gen_ai__tool__type="function")  # fmt: skip
    points = metered.points(TOOL_DURATION)
    assert set(points) == {
        key(**tool, **{"gen_ai.tool.name": "add"}),
        key(**tool, **{"gen_ai.tool.name": "boom", "error.type": "ValueError"}),
        key(**tool, **{"gen_ai.tool.name": "unknown_tool", "error.type": "unknown_tool"}),
    }
    assert all(point.count == 1 for point in points.values())
    assert metered.collect()[TOOL_DURATION].unit == "s"


async def test_a_failed_llm_call_records_its_duration_with_the_error_kind(
    metered: Metered,
) -> None:
    llm = ScriptedLLM([LLMError(ErrorKind.AUTHENTICATION, "bad key sk-123", status_code=401)])
    step = await CALC.run({"question": "1+2"}, llm=llm)
    assert step.failure is not None and step.failure.reason is FailReason.LLM_ERROR

    assert set(metered.points(OPERATION_DURATION)) == {
        key(**CHAT, **{"error.type": "authentication"})
    }
    assert TOKEN_USAGE not in metered.collect()  # no reply, no usage
    assert counts(metered, RUNS) == {failed_run("calc", "llm_error"): 1}
    assert counts(metered, TURNS) == {
        key(**dotted(gen_ai__agent__name="calc", subagent__turn__type="normal",
                     subagent__turn__outcome="fail", error__type="authentication")): 1
    }  # fmt: skip


async def test_unreported_usage_records_no_token_usage(metered: Metered) -> None:
    reply = LLMResponse(text='{"value": 3}', usage=Usage(unreported=1))
    step = await CALC.run({"question": "1+2"}, llm=ScriptedLLM([reply]))
    assert step.ok
    assert TOKEN_USAGE not in metered.collect()
    assert sum(point.count for point in metered.points(OPERATION_DURATION).values()) == 1


async def test_a_cancelled_run_counts_as_cancelled_and_its_turn_as_failed(
    metered: Metered,
) -> None:
    started = anyio.Event()

    async def hang(request: LLMRequest) -> str:
        started.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    scope = anyio.CancelScope()

    async def run_agent() -> None:
        with scope:
            await CALC.run({"question": "1+2"}, llm=ScriptedLLM([hang]))

    async with anyio.create_task_group() as group:
        group.start_soon(run_agent)
        await started.wait()
        scope.cancel()

    assert counts(metered, RUNS) == {failed_run("calc", "cancelled"): 1}
    assert counts(metered, TURNS) == {
        key(**dotted(gen_ai__agent__name="calc", subagent__turn__type="normal",
                     subagent__turn__outcome="fail", error__type="cancelled")): 1
    }  # fmt: skip
    (call_key,) = metered.points(OPERATION_DURATION)
    assert dict(call_key)["error.type"] == "cancelled"
    (run_key,) = metered.points(AGENT_DURATION)
    assert dict(run_key)["error.type"] == "cancelled"


async def test_metric_attributes_carry_no_content_and_no_ids(metered: Metered) -> None:
    secret = "SECRET-REPLY-TEXT"
    llm = ScriptedLLM(
        [
            LLMResponse(tool_calls=[ToolCall(id="call-XYZ", name=secret, arguments={"a": secret})]),
            f'{{"value": "{secret}"}}',
            '{"value": 3}',
        ]
    )
    step = await CALC.run({"question": secret}, llm=llm, max_turns=2, return_retries=1)
    assert step.ok
    for metric in metered.collect().values():
        for point in metric.data.data_points:
            attributes = dict(point.attributes or {})
            assert set(attributes) <= ALLOWED_KEYS, metric.name
            for value in attributes.values():
                assert secret not in str(value) and "call-XYZ" not in str(value), metric.name


async def run_nested() -> Step[Answer]:
    """An outer agent whose tool is an inner agent, each answering once."""
    inner = SubAgent(name="inner", prompt="Compute {{question}}", output=Answer)
    outer = SubAgent(name="outer", prompt="Ask {{question}}", output=Answer,
                     tools=[inner.as_tool(description="Compute.")])  # fmt: skip
    llm = ScriptedLLM(
        [
            LLMResponse(tool_calls=[ToolCall(name="inner", arguments={"question": "1+2"})]),
            '{"value": 3}',
            '{"value": 3}',
        ]
    )
    return await outer.run({"question": "1+2"}, llm=llm, max_turns=2)


async def test_a_nested_agent_records_under_its_own_name(metered: Metered) -> None:
    assert (await run_nested()).ok
    assert counts(metered, RUNS) == {
        key(**dotted(gen_ai__agent__name="outer", subagent__outcome="done")): 1,
        key(**dotted(gen_ai__agent__name="inner", subagent__outcome="done")): 1,
    }
    (tool_key,) = metered.points(TOOL_DURATION)
    assert dict(tool_key)["gen_ai.tool.name"] == "inner"


async def test_a_run_whose_tool_server_was_lost_counts_with_its_reason(metered: Metered) -> None:
    def lookup(key: str) -> str:
        raise ToolSourceLostError("server 'kv' went away", source="kv")

    agent = SubAgent(name="s1", prompt="p", output=Answer, tools=[lookup], max_turns=3)
    step = await agent.run(llm=ScriptedLLM([
        LLMResponse(tool_calls=[ToolCall(name="lookup", arguments={"key": "k"})]), '{"x": 1}',
    ]))  # fmt: skip
    assert step.failure is not None and step.failure.reason is FailReason.TOOL_SERVER_LOST
    assert counts(metered, RUNS) == {failed_run("s1", "tool_server_lost"): 1}
    (run_key,) = metered.points(AGENT_DURATION)
    assert dict(run_key)["error.type"] == "tool_server_lost"


async def test_the_model_a_server_replies_with_never_makes_a_metric_series(
    metered: Metered, traced: Traced
) -> None:
    # A server names whatever model it likes in each reply (a dated snapshot, a made-up
    # string): 50 replies, 50 names. The metrics keep one series per requested model; the
    # reply's model is on the chat span, where it costs no series.
    replies = [usage_reply('{"value": 3}', 10, 2).model_copy(update={"model": f"served-{n}"})
               for n in range(50)]  # fmt: skip
    llm = ScriptedLLM(replies)
    for _ in replies:
        assert (await CALC.run({"question": "1+2"}, llm=llm, tracer_provider=traced.provider)).ok
    for name in (TOKEN_USAGE, OPERATION_DURATION, AGENT_DURATION):
        for attributes in metered.points(name):
            assert "gen_ai.response.model" not in dict(attributes), name
            assert dict(attributes)["gen_ai.request.model"] == "scripted", name
    assert len(metered.points(TOKEN_USAGE)) == 2  # input and output, one series each
    assert len(metered.points(OPERATION_DURATION)) == 1
    chats = [attrs(span) for span in traced.spans if span.name.startswith("chat ")]
    assert sorted(chat["gen_ai.response.model"] for chat in chats) == sorted(
        f"served-{n}" for n in range(50)
    )


# --- the latest conventions (OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental) ---


async def test_the_latest_conventions_count_tokens_and_rename_the_durations(
    metered: Metered, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_semconv(monkeypatch, "gen_ai_latest_experimental")
    cached = Usage(input_tokens=100, output_tokens=7, cache_read_tokens=60, cache_write_tokens=30)
    llm = ScriptedLLM(
        [LLMResponse(text='{"value": "three"}', usage=cached), usage_reply('{"value": 3}', 130, 5)]
    )
    agent = SubAgent(name="s1", prompt="Compute {{question}}", output=Answer)
    step = await agent.run({"question": "1+2"}, llm=llm, max_turns=1, return_retries=2)
    assert step.ok

    found = metered.collect()
    assert {name: found[name].unit for name in found} == {
        USAGE_INPUT_TOKENS: "{token}", USAGE_OUTPUT_TOKENS: "{token}",
        USAGE_CACHE_READ_TOKENS: "{token}", USAGE_CACHE_WRITE_TOKENS: "{token}",
        INFERENCE_DURATION: "s", INVOCATION_DURATION: "s",
        RUNS: "{run}", TURNS: "{turn}", CORRECTIONS: "{turn}",
    }  # fmt: skip
    assert not {TOKEN_USAGE, OPERATION_DURATION, AGENT_DURATION} & set(found)  # not both

    text = key(**CHAT, **{"gen_ai.token.modality": "text"})
    assert {name: {k: p.value for k, p in metered.points(name).items()} for name in (
        USAGE_INPUT_TOKENS, USAGE_OUTPUT_TOKENS, USAGE_CACHE_READ_TOKENS,
        USAGE_CACHE_WRITE_TOKENS)} == {
        USAGE_INPUT_TOKENS: {text: 230}, USAGE_OUTPUT_TOKENS: {text: 12},
        USAGE_CACHE_READ_TOKENS: {text: 60}, USAGE_CACHE_WRITE_TOKENS: {text: 30},
    }  # fmt: skip

    (calls,) = metered.points(INFERENCE_DURATION).items()
    assert calls[0] == key(**CHAT) and calls[1].count == 2
    (run,) = metered.points(INVOCATION_DURATION).items()
    assert run[0] == key(
        **dotted(gen_ai__operation__name="invoke_agent", gen_ai__agent__name="s1",
                 gen_ai__request__model="scripted", gen_ai__invocation__is_nested=False)
    )  # fmt: skip
    assert list(run[1].explicit_bounds)[:2] == [0.1, 0.2]


async def test_the_latest_conventions_say_which_invocation_is_nested(
    metered: Metered, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_semconv(monkeypatch, "gen_ai_latest_experimental")
    assert (await run_nested()).ok
    nested = {dict(k)["gen_ai.agent.name"]: dict(k)["gen_ai.invocation.is_nested"]
              for k in metered.points(INVOCATION_DURATION)}  # fmt: skip
    assert nested == {"outer": False, "inner": True}
