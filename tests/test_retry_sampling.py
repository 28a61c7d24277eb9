"""eval/retry_sampling.py: correction turns sampled apart from the rest, on a scripted server."""

from __future__ import annotations

import json
from typing import Any

import pytest
from bfcl_data import load_cases, tool_name
from bfcl_systems import Server, run_subagent_contract
from openai_server import Reply, completion, running_server
from retry_sampling import CorrectionSampling, corrected_cases, repeats, summary

from subagent import OpenAIChat

pytestmark = pytest.mark.anyio


def a_right_call(case: Any) -> dict[str, Any]:
    ((name, arguments),) = case.answer[0].items()
    return {"name": tool_name(name), "arguments": {k: v[0] for k, v in arguments.items()
                                                   if v[0] != ""}}  # fmt: skip


async def test_only_the_correction_turns_are_sent_with_the_other_settings() -> None:
    case = load_cases("simple_python")[0]
    with running_server() as server:
        replies = ["not a call", "still not a call", json.dumps([a_right_call(case)])]
        server.script(*(Reply(body=completion(reply)) for reply in replies))
        async with OpenAIChat(model="local", base_url=server.base_url, _environ={}) as chat:
            llm = CorrectionSampling(chat, {"temperature": 0.7})
            outcome = await run_subagent_contract(case, Server(server.base_url), llm,
                                                  return_retries=2)  # fmt: skip
        temperatures = [request.json["temperature"] for request in server.requests]
    assert temperatures == [0.0, 0.7, 0.7]
    assert outcome.calls == [a_right_call(case)]


def test_the_cases_chosen_are_those_a_correction_ran_in_and_repeats_are_counted() -> None:
    first, second = load_cases("irrelevance")[:2]
    cases = {first.id: first, second.id: second}

    def record(case: Any, *texts: str) -> dict[str, Any]:
        turns = [{"text": text, "calls": []} for text in texts]
        outcome = {"calls": [], "turns": turns}
        return {"id": case.id, "digest": case.digest, "outcome": outcome}

    records = [record(first, "a", "a", "[]"), record(second, "[]")]
    assert corrected_cases(records, cases) == [first]
    assert repeats(records[0]["outcome"]) == 1
    assert summary(records, cases) == {"cases": 2, "correct": 2, "corrections": 2, "repeats": 1}
