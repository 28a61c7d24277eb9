"""A durable run on the local model, killed with SIGKILL between turns and resumed (issue 19).

The run is the ledger agent of tests/durable_child.py (its ``record`` tool appends each item
to a side-effect file) in a process of its own, against Qwen through a forwarding server on
127.0.0.1 that records every request and the model's reply to it: the record that proves
the LLM call completed before the kill was not made again after the restart.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import local_llm
import pytest

pytest.importorskip("dbos", reason="the dbos extra is not installed")

from durable_harness import WAIT, child
from openai_server import RecordedRequest, Reply, running_server

pytestmark = pytest.mark.e2e

# llama-cpp-python makes native tool calls only for a named tool_choice (docs/models.md);
# the adapter sends it only in the turns that offer tools.
SETTINGS = {
    "temperature": 0,
    "max_tokens": 96,
    "tool_choice": {"type": "function", "function": {"name": "record"}},
}


@dataclass
class Forwarder:
    """Answers each request with the upstream model's reply, recording both in order."""

    upstream: str  # the server's root, e.g. http://127.0.0.1:8080
    exchanges: list[tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=list)

    def __call__(self, request: RecordedRequest) -> Reply:
        response = httpx.post(self.upstream + request.path, json=request.json, timeout=WAIT)
        reply: dict[str, Any] = response.json()
        # Recorded before the reply goes out: once the child has it, the record holds it.
        self.exchanges.append((request.json, reply))
        return Reply.json(reply, status=response.status_code)


def _completed_items(turns: list[dict[str, Any]]) -> list[str]:
    """The items of the record calls that ran to the end, turn by turn, in call order."""
    items = []
    for turn in turns:
        ran = {result["call_id"] for result in turn["tool_results"] if result["ok"]}
        items += [call["arguments"]["item"] for call in turn["tool_calls"] if call["id"] in ran]
    return items


def test_a_run_killed_between_turns_resumes_without_calling_the_model_again(
    qwen: local_llm.LocalServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DURABLE_SETTINGS", json.dumps(SETTINGS))
    db_url = f"sqlite:///{tmp_path}/dbos.sqlite"
    side_effects = tmp_path / "ledger.txt"
    forwarder = Forwarder(f"http://127.0.0.1:{qwen.port}")
    with running_server() as proxy:
        proxy.script(*[forwarder] * 16)  # more than the run's 4 turns and their retries
        # Killed once turn 1 (its LLM call, then its tool call) is checkpointed, before
        # the LLM call of turn 2.
        with child(proxy.base_url, db_url, side_effects, "between:2") as first:
            assert first.next_line() == "AT between:2"
            first.kill()
        before = list(forwarder.exchanges)
        effects_before = side_effects.read_text().splitlines()
        with child(proxy.base_url, db_url, side_effects) as second:
            (step,) = second.steps()  # the resumed run ended, and its process exited 0

    # Before the kill: turn 1's call to the model, one record call that ran.
    ((request, reply),) = before
    assert len(request["messages"]) == 2  # the system prompt and the task
    turns = step["turns"]
    assert len(turns) >= 2  # the resumed process took turn 2 at least
    first_turn = turns[0]
    assert first_turn["tool_calls"], first_turn
    assert effects_before == _completed_items([first_turn]) != []

    # The resumed run's turn 1 is the reply recorded before the kill, read back from the
    # checkpoint: the model's own call ids, arguments and token counts.
    message = reply["choices"][0]["message"]
    assert [(c["id"], c["name"], c["arguments"]) for c in first_turn["tool_calls"]] == [
        (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in message["tool_calls"]
    ]
    assert first_turn["reply"] == (message.get("content") or "")
    usage = first_turn["usage"]
    assert (usage["input_tokens"], usage["output_tokens"]) == (
        reply["usage"]["prompt_tokens"], reply["usage"]["completion_tokens"]
    )  # fmt: skip

    # The final work turn goes under the output's schema (the typed agent's default): the
    # proxy is a server the adapter cannot identify, so OpenAI's json_schema goes first;
    # llama-cpp-python refuses it by name and the adapter sends the turn again as text.
    refused = [sent for sent, answer in forwarder.exchanges if "choices" not in answer]
    assert len(refused) <= 1 and all("response_format" in sent for sent in refused)
    # Every LLM call of the run was made once, across both processes: turn 1's request
    # never went out again, and each later turn sent one (a healthy server needs no retry).
    requests = [sent for sent, answer in forwarder.exchanges if "choices" in answer]
    assert requests.count(request) == 1
    assert all(turn["transport_retries"] == [] for turn in turns)
    assert len(requests) == len(turns)
    assert [len(sent["messages"]) for sent in requests] == [turn["messages_sent"] for turn in turns]

    # Each completed tool call ran exactly once: turn 1's before the kill, never again.
    assert side_effects.read_text().splitlines() == _completed_items(turns)
    assert step["ok"] or step["failure"]["reason"] in ("budget_exhausted", "explicit_fail")
