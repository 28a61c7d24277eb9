"""eval/retry_sampling.py: correction turns sampled apart from the rest, as an evals variant,
on a scripted server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from bfcl_data import BfclChecker, load_cases, tool_name
from bfcl_systems import Server, system_named
from convert_records import convert_folder
from openai_server import Reply, completion, running_server
from retry_sampling import corrected_cases, sampled_variant, summary
from run_bfcl import client_for, record_path

from subagent.evals import Dataset, Report

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[1]


def a_right_call(case: Any) -> dict[str, Any]:
    ((name, arguments),) = case.expected[0].items()
    return {"name": tool_name(name), "arguments": {k: v[0] for k, v in arguments.items()
                                                   if v[0] != ""}}  # fmt: skip


async def test_only_the_correction_turns_are_sent_with_the_other_settings(tmp_path: Path) -> None:
    case = load_cases("simple_python")[0]
    system = system_named("subagent-r2")
    path = tmp_path / "subagent-r2@t0.7.jsonl"
    with running_server() as server:
        replies = ["not a call", "still not a call", json.dumps([a_right_call(case)])]
        server.script(*(Reply(body=completion(reply)) for reply in replies))
        at = Server(server.base_url)
        async with client_for(system, at) as chat:
            variant = sampled_variant(system, 0.7, chat)
            assert variant.name == "subagent-r2@t0.7"
            await Dataset([case], [BfclChecker()], name="bfcl").evaluate(
                system.target(at, chat), [variant], out=path, llm=chat
            )
        temperatures = [request.json["temperature"] for request in server.requests]
    assert temperatures == [0.0, 0.7, 0.7]
    assert summary(path) == {"cases": 1, "correct": 1, "corrections": 2, "repeats": 0}
    assert sampled_variant(system, 0, None).options == system.options  # as it is


async def test_the_cases_chosen_are_those_a_correction_ran_in_and_repeats_are_counted(
    tmp_path: Path,
) -> None:
    first, second = load_cases("irrelevance")[:2]
    lines = [
        {"system": "subagent-r1", "temperature": 0.0, "category": "irrelevance", "id": case.name,
         "digest": case.metadata["bfcl_digest"],
         "outcome": {"calls": [], "llm_calls": len(texts), "prompt_tokens": 1,
                     "completion_tokens": 1, "error": None, "seconds": 1.0,
                     "turns": [{"text": t, "calls": [], "feedback": "no" if i < len(texts) - 1
                                else None} for i, t in enumerate(texts)]}}
        for case, texts in ((first, ("a", "a", "[]")), (second, ("[]",)))
    ]  # fmt: skip
    path = tmp_path / "subagent-r1@t0.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    await convert_folder(tmp_path)
    cases = {case.name: case for case in (first, second)}
    assert corrected_cases(path, cases) == [first]
    assert summary(path) == {"cases": 2, "correct": 2, "corrections": 2, "repeats": 1}


def test_the_committed_retry_sampling_records_give_what_the_page_says() -> None:
    results = ROOT / "eval" / "results" / "retry-sampling"
    found = {path.stem: summary(path) for path in results.glob("*.jsonl")}
    # (cases, ended correct, corrections, repeated corrections): no correction ends right
    assert {name: tuple(s.values()) for name, s in found.items()} == {
        "subagent-r1@t0": (21, 0, 21, 17),
        "subagent-r1@t0.7": (21, 0, 21, 12),
        "subagent-r2@t0": (15, 0, 28, 27),
        "subagent-r2@t0.7": (15, 0, 30, 20),
    }
    chosen = corrected_cases(record_path(ROOT / "eval" / "results" / "bfcl", "subagent-r2",
                                         "template"),
                             {c.name: c for name in ("simple_python", "multiple", "parallel",
                                                     "parallel_multiple", "irrelevance")
                              for c in load_cases(name)})  # fmt: skip
    assert len(chosen) == 15
    assert Report.read(results / "subagent-r2@t0.jsonl").variants[0].variant == "subagent-r2@t0"
