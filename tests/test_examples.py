"""The README quickstart and the core examples run as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from anthropic_server import API_KEY, Reply, message, running_anthropic, text, tool_use
from support import run_example

from subagent._phases import mermaid_chart

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _block(text: str, language: str, after_heading: str) -> str:
    section = text.split(after_heading, 1)[1]
    match = re.search(rf"```{language}\n(.*?)```", section, re.DOTALL)
    assert match, f"no {language} block after {after_heading!r}"
    return match.group(1)


def test_readme_quickstart_runs_alone_in_a_fresh_interpreter() -> None:
    # The docs harness runs the README's blocks in one namespace; a reader copies the
    # quickstart alone, so it must need nothing from the page around it.
    code = _block(README, "python", "## Quickstart")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=ROOT, timeout=60, check=False)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "done in 3 turns (normal, must_return, retry)"


def test_readme_state_chart_is_generated_from_the_table() -> None:
    assert _block(README, "mermaid", "## The state machine") == mermaid_chart()


def test_docs_state_chart_is_generated_from_the_table() -> None:
    text = (ROOT / "docs" / "state-chart.md").read_text(encoding="utf-8")
    assert _block(text, "mermaid", "# ") == mermaid_chart()


def test_quickstart_example_prints_its_turn_table() -> None:
    out = run_example("quickstart.py")
    lines = out.splitlines()
    assert [line.split()[1] for line in lines[1:4]] == ["normal", "must_return", "retry"]
    assert "output: Answer(value=3)" in out


def test_streaming_example_streams_both_turns_and_corrects() -> None:
    out = run_example("streaming.py")
    assert '[turn 1 must_return] Probably warm: {"city": "Lisbon", "high_c": "twenty-four"}' in out
    assert '[turn 2 retry] {"city": "Lisbon", "high_c": 24}' in out
    assert "output: Forecast(city='Lisbon', high_c=24)" in out


def test_streaming_output_example_redraws_the_plan_as_it_forms_then_the_final_one() -> None:
    lines = run_example("streaming_output.py").splitlines()
    assert lines[0] == "turn 1 (must_return)"
    second = lines.index("turn 2 (retry)")
    first_turn, second_turn = lines[1:second], lines[second + 1 : -1]
    # Each turn's plan grows task by task, never showing a task half written.
    assert first_turn[-1] == (
        "  so far: 'ship the billing page' "
        "[draft the page layout (2d), wire up the payment provider (3d)]"
    )
    assert len(second_turn) >= 3 and second_turn[0].startswith("  so far:")
    assert second_turn[-1] == (
        "  final: 'ship the billing page' [draft the page layout (2d), wire up the payment "
        "provider (3d), review with the finance team (1d)]"
    )
    assert lines[-1] == "done in 2 turns (must_return, retry)"


def test_nested_agents_example_uses_the_inner_agent_as_a_tool() -> None:
    out = run_example("nested_agents.py")
    assert "planner: turn 1 normal (1 tools offered)" in out
    assert "planner: turn 2 must_return (0 tools offered)" in out
    assert '{"country":"Portugal","capital":"Lisbon"}' in out
    assert "output: Trip(destination='Lisbon'" in out


def test_watch_and_stop_example_streams_a_run_then_stops_one() -> None:
    out = run_example("watch_and_stop.py")
    assert "  calls add({'a': 17, 'b': 25})" in out
    assert "  text: '42}'" in out
    assert "run: done in 2 turns (normal, must_return), output Answer(value=42)" in out
    assert "stopped: failed (cancelled: the run was stopped before it finished) in 2 turns" in out


def test_approval_example_is_answered_from_a_second_process() -> None:
    out = run_example("approval.py")
    assert "[runner]   paused (1 call(s) awaiting approval) in 1 turn (normal)" in out
    assert "[runner]   waiting: deploy({'env': 'production'})" in out
    assert "[approver]   turn 1: error    {'deploy-production': 'deny'}" in out
    assert "[approver]   turn 2: continue {'deploy-staging': 'approve'}" in out
    assert "[approver] output: Release 1.4 is live on staging." in out
    # The deploy ran once, in the approver's process; never in the runner's.
    assert "[approver] deployed from this process: ['staging']" in out
    assert "[runner]   deployed from this process: []" in out


def test_batch_store_example_reruns_only_the_retryable_failures() -> None:
    out = run_example("batch_store.py")
    assert "first pass: 16 done, 4 failed, 20 calls" in out
    assert "retryable: Graz, Lyon, Porto" in out
    assert "second pass: 3 done, 23 calls in all" in out
    assert "done                19 (95.0%)" in out
    assert "  explicit_fail     1" in out


def test_durable_crash_resume_example_resumes_without_repeating_completed_calls() -> None:
    pytest.importorskip("dbos", reason="the dbos extra is not installed")
    assert run_example("durable_crash_resume.py", timeout=120).splitlines() == [
        "first process: killed by SIGKILL during deploy('web')",
        "second process: done in 3 turns, deployed api, web",
        "ledger: api, web (each deploy happened once)",
        "model calls made by the second process: 1 of 3",
    ]


def test_metrics_demo_prints_the_metrics_of_its_three_runs() -> None:
    rows = {tuple(line.split()[:-1]): line.split()[-1]
            for line in run_example("metrics_demo.py").splitlines()}  # fmt: skip
    assert rows[("gen_ai.client.token.usage", "{token}", "input", "count=8")] == "sum=280"
    assert rows[("gen_ai.client.operation.duration", "s")] == "count=8"
    assert rows[("gen_ai.execute_tool.duration", "s", "add")] == "count=1"
    assert rows[("subagent.runs", "{run}", "done")] == "2"
    assert rows[("subagent.runs", "{run}", "failed", "budget_exhausted")] == "1"
    assert rows[("gen_ai.invoke_agent.duration", "s", "budget_exhausted")] == "count=1"
    assert rows[("subagent.turns", "{turn}", "retry", "success")] == "1"
    assert rows[("subagent.corrections", "{turn}", "success")] == "1"
    assert rows[("subagent.corrections", "{turn}", "error")] == "1"


def test_deps_example_hands_the_database_to_the_tool_validator_and_instructions() -> None:
    out = run_example("deps.py")
    assert "tool sees: caller=ada@example.com turn=1 phase=normal" in out
    assert "the model sees the parameters: ['order_id']" in out
    assert "system prompt ends: You are answering ada@example.com." in out
    assert "the status of A-1 is 'shipped', not 'delivered'" in out
    assert "output: Reply(order_id='A-1', status='shipped')" in out


def test_usage_limits_example_stops_a_run_a_nested_agent_and_a_batch() -> None:
    out = run_example("usage_limits.py")
    assert "1. failed (usage_limit: usage limit exceeded by the reply: max_total_tokens=1200" in out
    assert "retryable: False; tokens kept on the turns: 1500" in out
    assert "2. searcher: usage_limit: usage limit reached before the call" in out
    assert "of agent 'researcher'" in out
    assert (
        "3. 6 inputs, 6 Steps: ['done', 'done', 'done', 'done', 'usage_limit', 'usage_limit']"
        in out
    )


def test_mcp_tools_example_calls_a_stdio_mcp_server_beside_a_python_tool() -> None:
    out = run_example("mcp_tools.py")
    assert out.splitlines() == [
        "offered: add, multiply",
        "add: 5.0",
        "multiply: 20.0",
        "done in 3 turns (normal, normal, normal) -> 20",
    ]


def test_testing_agents_example_tests_the_application_without_a_model_or_a_key() -> None:
    out = run_example("testing_agents.py")
    assert out.splitlines() == [
        "TestLLM:     Trip(city='a', days=1, budget_eur=0.5)",
        "             2 calls; tools offered on the first: ['flight_price']",
        "FunctionLLM: Trip(city='Lisbon', days=3, budget_eur=390.0)",
        "blocked:     LLMSpec('openai:gpt-4o-mini') would send a real model request",
    ]


def test_fallback_example_moves_on_from_a_model_that_is_down() -> None:
    assert run_example("fallback.py").splitlines() == [
        "output: Answer(value=3)",
        "  big-model attempt 1: connection",
        "  big-model attempt 2: connection -> small-model",
    ]


def test_corrections_example_asks_for_a_grammar_then_escalates_after_a_repeat() -> None:
    out = run_example("corrections.py")
    assert "1. done in 2 turns (must_return, retry); asked for: prompted, json_schema" in out
    assert "turn 2 retry       small    repeated" in out
    assert "turn 3 retry       stronger corrected" in out
    assert "tokens by model: {'small': 116, 'stronger': 208}" in out
    assert "salvaged 1 of 1 corrected run(s), 1 repeated correction(s)" in out


def test_anthropic_example_calls_a_tool_then_answers_and_shows_the_cache_tokens() -> None:
    with running_anthropic() as api:
        api.script(
            Reply.json(message(text("Looking it up."), tool_use("weather", {"city": "Oslo"},
                                                                "toolu_w1"),
                               stop_reason="tool_use", input_tokens=40, cache_write=1300,
                               output_tokens=20)),
            Reply.json(message(text('{"city": "Oslo", "high_c": 14}'), input_tokens=60,
                               cache_read=1300, output_tokens=15)),
        )  # fmt: skip
        lines = run_example("anthropic_native.py", args=[api.base_url],
                            env={"ANTHROPIC_API_KEY": API_KEY}).splitlines()  # fmt: skip
        refused, requests = list(api.refused), list(api.requests)
    assert refused == [] and len(requests) == 2
    assert requests[0].json["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert lines == [
        "output: Forecast(city='Oslo', high_c=14)",
        "turn 1 normal: tool_calls (tool_use); 1340 in (0 from the cache, 1300 written to it), "
        "20 out",
        "turn 2 normal: stop (end_turn); 1360 in (1300 from the cache, 0 written to it), 15 out",
        "done in 2 turns (normal, normal)",
    ]
