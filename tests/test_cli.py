"""The command line (``subagent`` / ``python -m subagent``) against a real loopback server.

The agents live in ``tests/cli_agents.py``; the model is the scripted OpenAI-compatible
server of ``tests/openai_server.py``, named to the command line by ``SUBAGENT_LLM`` as a user
would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_agents import Answer
from openai_server import RecordedRequest, Reply, ScriptedServer, completion

from subagent import Step, cli

TESTS = Path(__file__).resolve().parent
SECRET = "sk-cli-test-0123456789abcdef"


@pytest.fixture
def model(server: ScriptedServer, monkeypatch: pytest.MonkeyPatch) -> ScriptedServer:
    """The loopback server, configured as the model the way a user does it."""
    for name in ("OPENAI_BASE_URL", "OPENAI_MODEL", "OTEL_EXPORTER_OTLP_ENDPOINT",
                 "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SUBAGENT_LLM", f"openai:served-model@{server.base_url}")
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    return server


def reply(text: str) -> Reply:
    return Reply.json(completion(text))


def task_of(request: RecordedRequest) -> str:
    """The task the agent's prompt rendered: the first user message."""
    return str(next(m["content"] for m in request.json["messages"] if m["role"] == "user"))


def doubled(request: RecordedRequest) -> Reply:
    """Doubles the number at the end of the task."""
    n = int(task_of(request).split()[-1])
    return reply(json.dumps({"value": 2 * n}))


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = cli.main(argv)
    out, err = capsys.readouterr()
    return status, out, err


def test_run_prints_the_turn_table_and_exits_0_when_done(
    model: ScriptedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    model.script(reply('{"value": 3}'))
    status, out, _ = run(["run", "cli_agents:answer", "--context", '{"question": "1+2"}'],
                         capsys)  # fmt: skip
    assert status == cli.EXIT_DONE == 0
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["turn", "type", "outcome", "tok"]
    assert lines[1].split()[:5] == ["1", "must_return", "success", "11", "7"]
    assert lines[2] == "done in 1 turn (must_return)"
    assert lines[3] == "output: Answer(value=3)"
    assert task_of(model.requests[0]) == "Answer 1+2"


def test_run_exits_1_when_the_run_fails(
    model: ScriptedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    model.script(reply("no idea"), reply("still no idea"))
    status, out, _ = run(["run", "cli_agents:answer", "--context", '{"question": "1+2"}',
                          "--return-retries", "1"], capsys)  # fmt: skip
    assert status == cli.EXIT_FAILED == 1
    assert "failed (budget_exhausted" in out
    assert "in 2 turns (must_return, retry)" in out
    assert len(model.requests) == 2


def test_the_budgets_given_reach_the_run(
    model: ScriptedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    model.script(reply("a"), reply("b"), reply("c"), reply('{"value": 3}'))
    status, out, _ = run(["run", "cli_agents:answer", "--context", '{"question": "1+2"}',
                          "--max-turns", "2", "--return-retries", "2"], capsys)  # fmt: skip
    assert status == 0
    assert "done in 4 turns (normal, must_return, retry, retry)" in out


def test_run_json_prints_the_step_which_loads_back(
    model: ScriptedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    model.script(reply('{"value": 3}'))
    status, out, _ = run(["run", "cli_agents:answer", "--context", '{"question": "1+2"}',
                          "--json"], capsys)  # fmt: skip
    assert status == 0
    step = Step[Answer].model_validate_json(out)
    assert step.ok and step.output == Answer(value=3)
    assert SECRET not in out


def test_a_context_in_a_file_is_read_after_an_at_sign(
    model: ScriptedServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    context = tmp_path / "context.json"
    context.write_text('{"question": "6*7"}')
    model.script(reply('{"value": 42}'))
    status, _, _ = run(["run", "cli_agents:answer", "--context", f"@{context}"], capsys)
    assert status == 0
    assert task_of(model.requests[0]) == "Answer 6*7"


def test_an_agent_file_path_works_like_a_module(
    model: ScriptedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    model.script(reply('{"value": 3}'))
    status, out, _ = run(["run", f"{TESTS / 'cli_agents.py'}:answer", "--context",
                          '{"question": "1+2"}'], capsys)  # fmt: skip
    assert status == 0, out
    assert "done in 1 turn" in out


def test_the_agents_own_model_serves_when_none_is_configured(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("SUBAGENT_LLM", "OPENAI_BASE_URL", "OPENAI_MODEL"):
        monkeypatch.delenv(name, raising=False)
    status, out, _ = run(["run", "cli_agents:own_model", "--context", '{"question": "x"}'],
                         capsys)  # fmt: skip
    assert status == 0
    assert "output: Answer(value=42)" in out


def test_no_model_anywhere_is_bad_usage_saying_what_to_set(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("SUBAGENT_LLM", "OPENAI_BASE_URL", "OPENAI_MODEL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(cli, "_local_llm_module", lambda: None)  # an installed package
    status, _, err = run(["run", "cli_agents:answer", "--context", '{"question": "x"}'],
                         capsys)  # fmt: skip
    assert status == cli.EXIT_USAGE == 2
    assert "error: no model: set SUBAGENT_LLM" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "no_colon"], "MODULE:AGENT: expected 'module:name'"),
        (["run", "cli_agents_nowhere:answer"], "MODULE:AGENT: cannot import 'cli_agents_nowhere'"),
        (["run", "cli_agents:missing"], "MODULE:AGENT: 'cli_agents' has no attribute 'missing'"),
        (["run", "cli_agents:NOT_AN_AGENT"], "'cli_agents:NOT_AN_AGENT' is an int, not a SubAgent"),
        (["run", "nowhere/agents.py:answer"], "MODULE:AGENT: no file 'nowhere/agents.py'"),
        (["run", "cli_agents:answer", "--context", "{nope"], "--context: not JSON"),
        (["run", "cli_agents:answer", "--context", "[1]"],
         "--context: must be a JSON object, got list"),
        (["run", "cli_agents:answer", "--context", "@/nowhere/context.json"],
         "--context @/nowhere/context.json: cannot read '/nowhere/context.json'"),
        (["run", "cli_agents:answer", "--context", '{"q": 1}'],
         "--context: template 'prompt' needs variable 'question', which was not provided"),
        (["run", "cli_agents:answer", "--max-turns", "0"], "--max-turns: "),
        (["run", "cli_agents:answer", "--return-retries", "-1"], "--return-retries: "),
        (["batch", "cli_agents:answer", "--input", "/nowhere/in.jsonl", "--output", "o.jsonl"],
         "--input: cannot read '/nowhere/in.jsonl'"),
        (["batch", "cli_agents:answer", "--input", "x", "--output", "y", "--concurrency", "0"],
         "--concurrency: must be at least 1, got 0"),
    ],
)  # fmt: skip
def test_bad_usage_exits_2_naming_the_argument(
    model: ScriptedServer, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    status, out, err = run(argv, capsys)
    assert status == 2
    assert message in err
    assert out == ""
    assert model.requests == []


def test_an_input_line_that_is_not_json_is_named(
    model: ScriptedServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    inputs = tmp_path / "in.jsonl"
    inputs.write_text('{"question": "1"}\n{oops\n')
    status, _, err = run(["batch", "cli_agents:answer", "--input", str(inputs), "--output",
                          str(tmp_path / "out.jsonl")], capsys)  # fmt: skip
    assert status == 2
    assert "--input: line 2 is not JSON" in err


def test_arguments_argparse_rejects_exit_2_too(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["run", "cli_agents:answer", "--max-turns", "two"])
    assert exited.value.code == 2
    assert "--max-turns: invalid int value: 'two'" in capsys.readouterr().err


def test_a_batch_writes_a_line_per_input_and_resumes_with_only_the_missing_ones(
    model: ScriptedServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    inputs, outputs = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inputs.write_text("".join(json.dumps({"question": n}) + "\n" for n in range(5)))
    model.script(*[doubled] * 5)
    argv = ["batch", "cli_agents:answer", "--input", str(inputs), "--output", str(outputs),
            "--concurrency", "3"]  # fmt: skip
    status, out, _ = run(argv, capsys)
    assert status == 0
    assert "done                5 (100.0%)" in out
    lines = [json.loads(line) for line in outputs.read_text().splitlines()]
    assert sorted(line["index"] for line in lines) == [0, 1, 2, 3, 4]
    for line in lines:
        step = Step[Answer].model_validate(line["step"])
        assert step.output == Answer(value=2 * line["context"]["question"])

    # Killed after two whole lines and part of a third: only the other three run again.
    text = outputs.read_text()
    cut = text.index("\n", text.index("\n") + 1) + 1
    outputs.write_text(text[: cut + 30])
    model.requests.clear()
    model.script(*[doubled] * 3)
    status, out, err = run(argv, capsys)
    assert status == 0
    assert "3 of 5 inputs to run (2 already in" in err
    assert len(model.requests) == 3
    lines = [json.loads(line) for line in outputs.read_text().splitlines()]
    assert sorted(line["index"] for line in lines) == [0, 1, 2, 3, 4]


def test_a_batch_with_a_failed_run_exits_1(
    model: ScriptedServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    inputs, outputs = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inputs.write_text('{"question": 1}\n{"question": 2}\n')
    model.script(doubled, reply("no idea"))
    status, out, _ = run(["batch", "cli_agents:answer", "--input", str(inputs), "--output",
                          str(outputs), "--concurrency", "1"], capsys)  # fmt: skip
    assert status == 1
    assert "failed              1" in out, out


def test_trace_prints_the_span_tree_of_the_run(
    model: ScriptedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    model.script(reply("no idea"), reply('{"value": 3}'))
    status, out, err = run(["run", "cli_agents:answer", "--context", '{"question": "1+2"}',
                            "--return-retries", "1", "--trace"], capsys)  # fmt: skip
    assert status == 0
    tree = [line for line in err.splitlines() if "ms" in line]
    assert tree[0].startswith("invoke_agent answer  done")
    assert tree[1].startswith("├─ agent_turn must_return  error  invalid_output")
    assert tree[2].startswith("│  └─ chat served-model  stop  tokens 11/7")
    assert tree[3].startswith("└─ agent_turn retry  success")
    assert tree[4].startswith("   └─ chat served-model")
    assert "done in 2 turns" in out


def test_an_api_key_the_server_echoes_is_never_printed(
    model: ScriptedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    echo = f"Incorrect API key provided: {SECRET}. Authorization: Bearer {SECRET}"
    model.script(Reply.error(401, echo))
    for flags in ([], ["--json"], ["--trace"]):
        model.script(Reply.error(401, echo))
        status, out, err = run(["run", "cli_agents:answer", "--context", '{"question": "x"}',
                                *flags], capsys)  # fmt: skip
        assert status == 1
        assert "authentication" in out
        assert SECRET not in out + err


def test_python_dash_m_subagent_is_the_same_program(model: ScriptedServer) -> None:
    model.script(reply('{"value": 3}'))
    env = {**os.environ, "PYTHONPATH": str(TESTS)}
    done = subprocess.run(
        [sys.executable, "-m", "subagent", "run", "cli_agents:answer", "--context",
         '{"question": "1+2"}'],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "done in 1 turn (must_return)" in done.stdout

    chart = subprocess.run([sys.executable, "-m", "subagent", "chart"], capture_output=True,
                           text=True, timeout=60, check=False)  # fmt: skip
    assert chart.returncode == 0
    assert chart.stdout.startswith("stateDiagram-v2")
    assert "must_return --> retry" in chart.stdout
