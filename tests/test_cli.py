"""The command line (``subagent`` / ``python -m subagent``) against a real loopback server.

The agents live in ``tests/cli_agents.py``; the model is the scripted OpenAI-compatible
server of ``tests/openai_server.py``, named to the command line by ``SUBAGENT_LLM`` as a user
would.
"""

from __future__ import annotations

import gc
import io
import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import cli_agents
import pytest
from cli_agents import Answer
from openai_server import MAX_WAIT, RecordedRequest, Reply, ScriptedServer, completion
from otlp_receiver import http_receiver

import subagent
from subagent import Step, cli, local_model
from subagent.cli import _batch_files, _reading, _status

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
    """The task the agent's prompt rendered: the first user message, before any notice."""
    first = next(m["content"] for m in request.json["messages"] if m["role"] == "user")
    return str(first).split("\n\nIMPORTANT: ", 1)[0]


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
    assert status == _status.EXIT_DONE == 0
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
    assert status == _status.EXIT_FAILED == 1
    assert "failed (budget_exhausted" in out
    assert "in 2 turns (must_return, retry)" in out
    assert len(model.requests) == 2


def test_a_task_an_input_guardrail_refuses_prints_its_reason_and_exits_1(
    model: ScriptedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = run(["run", "cli_agents:guarded", "--context",
                          '{"question": "my homework"}'], capsys)  # fmt: skip
    assert status == _status.EXIT_FAILED
    assert out.splitlines()[1:] == ["failed (input_refused: no homework here) in 0 turns ()"]
    assert model.requests == []


def test_a_rows_error_is_its_first_field_error_not_the_heading_above_it(
    model: ScriptedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    model.script(reply('{"value": "three"}'))
    status, out, _ = run(["run", "cli_agents:answer", "--context", '{"question": "1+2"}'],
                         capsys)  # fmt: skip
    assert status == _status.EXIT_FAILED
    row = out.splitlines()[1]
    assert row.split()[:3] == ["1", "must_return", "error"]
    assert "value: " in row and "does not match" not in row


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
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    for name in ("SUBAGENT_LLM", "OPENAI_BASE_URL", "OPENAI_MODEL"):
        monkeypatch.delenv(name, raising=False)
    started = stub_local_model(monkeypatch, "http://127.0.0.1:9/v1")
    status, _, err = run(["run", "cli_agents:answer", "--context", '{"question": "x"}'],
                         capsys)  # fmt: skip
    assert status == _status.EXIT_USAGE == 2
    assert "error: no model: pass --llm or set SUBAGENT_LLM" in err
    inputs = write_inputs(tmp_path / "in.jsonl", {"question": 1})
    status, _, err = run(batch_argv(inputs, tmp_path / "out.jsonl"), capsys)
    assert status == 2
    assert "subagent batch: error: no model: pass --llm" in err
    assert started == []  # the local model is offered, never started unasked


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
    assert tree[0].startswith("invoke_agent answer  done  budget 1+1")
    assert tree[1].startswith("├─ agent_turn must_return  error  invalid_output  stop  left 0+1")
    assert tree[2].startswith("│  └─ chat served-model  stop  tokens 11/7")
    assert tree[3].startswith("└─ agent_turn retry  success  stop  left 0+0")
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


# --- exit statuses: failed (1), bad usage (2), a bug in the agent's code (3), Ctrl-C (130) ---


def test_the_program_exits_with_each_status_and_never_a_traceback(model: ScriptedServer) -> None:
    env = {**os.environ, "PYTHONPATH": str(TESTS)}
    cases = [
        (["run", "cli_agents:answer", "--context", '{"question": "1"}'], reply("no idea"), 1),
        (["run", "cli_agents:answer", "--context", '{"q": "1"}'], None, 2),
        (["run", "cli_agents:broken", "--context", '{"question": "1"}'], reply("x"), 3),
    ]  # fmt: skip
    for argv, answer, expected in cases:
        if answer is not None:
            model.script(answer)
        done = subprocess.run([sys.executable, "-m", "subagent", *argv], capture_output=True,
                              text=True, env=env, timeout=60, check=False)  # fmt: skip
        assert done.returncode == expected, done.stderr
        assert "Traceback" not in done.stderr
        assert SECRET not in done.stdout + done.stderr


def batch_argv(inputs: Path, outputs: Path, *flags: str, agent: str = "answer") -> list[str]:
    return ["batch", f"cli_agents:{agent}", "--input", str(inputs), "--output", str(outputs),
            "--concurrency", "1", *flags]  # fmt: skip


def write_inputs(path: Path, *contexts: object) -> Path:
    path.write_text("".join(json.dumps(context) + "\n" for context in contexts))
    return path


def test_a_missing_prompt_variable_in_a_batch_exits_2_naming_the_line_before_any_run(
    model: ScriptedServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    inputs = write_inputs(tmp_path / "in.jsonl", {"question": 1}, {"q": 2})
    status, out, err = run(batch_argv(inputs, tmp_path / "out.jsonl"), capsys)
    assert status == _status.EXIT_USAGE == 2
    assert "--input: line 2: template 'prompt' needs variable 'question'" in err
    assert model.requests == []
    assert out == ""
    assert not (tmp_path / "out.jsonl").exists()


def test_a_run_whose_agent_code_raises_exits_3_with_one_line_not_a_traceback(
    model: ScriptedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    model.script(reply("anything"))
    status, out, err = run(["run", "cli_agents:broken", "--context", '{"question": "x"}'],
                           capsys)  # fmt: skip
    assert status == _status.EXIT_ERROR == 3
    problem = [line for line in err.splitlines() if "error" in line]
    assert problem == [
        "subagent run: error in the agent or code it runs: ParserContractError: parser "
        "'broken_parser' raised RuntimeError: the parser has a bug (a parser must return "
        "ParseResult.error(feedback) for bad replies)"
    ]
    assert "Traceback" not in err
    assert out == ""


def test_a_batch_with_a_run_that_raised_exits_3_naming_the_line(
    model: ScriptedServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    inputs = write_inputs(tmp_path / "in.jsonl", {"question": 1}, {"question": 2})
    model.script(reply("a"), reply("b"))
    status, out, err = run(batch_argv(inputs, tmp_path / "out.jsonl", agent="broken"), capsys)
    assert status == 3
    assert "  error             2" in out  # the summary is still printed
    assert "2 run(s) raised (failed(error), lines 1, 2 of" in err
    assert "line 1: ParserContractError: parser 'broken_parser' raised RuntimeError" in err


def test_a_failed_run_and_a_raised_one_in_a_batch_exit_3(
    model: ScriptedServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    outputs = tmp_path / "out.jsonl"
    inputs = write_inputs(tmp_path / "in.jsonl", {"question": 1})
    model.script(reply("no idea"))
    assert run(batch_argv(inputs, outputs), capsys)[0] == _status.EXIT_FAILED == 1
    write_inputs(inputs, {"question": 1}, {"question": 2})
    model.script(reply("x"))
    assert run(batch_argv(inputs, outputs, agent="broken"), capsys)[0] == 3


def test_an_agent_module_that_raises_on_import_exits_3(
    model: ScriptedServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    module = tmp_path / "buggy_agents.py"
    module.write_text("raise ZeroDivisionError('a bug at import')\n")
    status, _, err = run(["run", f"{module}:agent"], capsys)
    assert status == 3
    assert f"importing '{module}' raised ZeroDivisionError: a bug at import" in err
    monkeypatch = pytest.MonkeyPatch()
    with monkeypatch.context() as patched:
        patched.syspath_prepend(str(tmp_path))
        status, _, err = run(["run", "buggy_agents:agent"], capsys)
    assert status == 3
    assert "importing 'buggy_agents' raised ZeroDivisionError" in err


def test_an_unexpected_error_is_one_line_exit_3_and_a_traceback_on_request(
    model: ScriptedServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_table(step: Step) -> str:
        raise LookupError("a bug\n  in the table")

    monkeypatch.setattr(cli._run, "turn_table", broken_table)
    model.script(reply('{"value": 3}'))
    status, _, err = run(["run", "cli_agents:answer", "--context", '{"question": "1"}'], capsys)
    assert status == 3
    assert "unexpected error: LookupError: a bug in the table (set SUBAGENT_TRACEBACK=1" in err
    assert len(err.splitlines()) == 2  # the model line, then one line
    monkeypatch.setenv("SUBAGENT_TRACEBACK", "1")
    model.script(reply('{"value": 3}'))
    with pytest.raises(LookupError):
        cli.main(["run", "cli_agents:answer", "--context", '{"question": "1"}'])


def test_ctrl_c_during_a_batch_says_how_far_it_got_and_how_to_resume(
    model: ScriptedServer, tmp_path: Path
) -> None:
    inputs = write_inputs(tmp_path / "in.jsonl", *({"question": n} for n in range(3)))
    outputs = tmp_path / "out.jsonl"
    second_asked = threading.Event()

    def hold(request: RecordedRequest) -> Reply:
        second_asked.set()
        return Reply.json(completion('{"value": 0}'), delay=MAX_WAIT)  # until the reset

    model.script(doubled, hold)
    env = {**os.environ, "PYTHONPATH": str(TESTS)}
    process = subprocess.Popen(
        [sys.executable, "-m", "subagent", *batch_argv(inputs, outputs)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        # Ctrl-C's default even where the test runner's shell ignores SIGINT (a background job)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        assert second_asked.wait(60), "the batch never reached its second input"
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()
        model.reset()  # releases the held reply
    assert process.returncode == _status.EXIT_INTERRUPTED == 130, err
    assert "Traceback" not in err
    assert (
        f"subagent batch: interrupted: 1 of 3 inputs have their result in {outputs} (1 from "
        "this run); run the same command again to run the other 2"
    ) in err
    assert [json.loads(line)["index"] for line in outputs.read_text().splitlines()] == [0]
    assert out == ""


# --- batch: results found by the input itself ---


def output_contexts(path: Path) -> list[tuple[int, object]]:
    return [(line["index"], line["context"]["question"])
            for line in map(json.loads, path.read_text().splitlines())]  # fmt: skip


def test_an_edited_input_line_runs_again_and_never_reuses_the_old_result(
    model: ScriptedServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    inputs = write_inputs(tmp_path / "in.jsonl", *({"question": n} for n in (1, 2, 3)))
    outputs = tmp_path / "out.jsonl"
    model.script(*[doubled] * 3)
    assert run(batch_argv(inputs, outputs), capsys)[0] == 0

    write_inputs(inputs, {"question": 1}, {"question": 20}, {"question": 3})
    model.requests.clear()
    model.script(doubled)
    status, out, err = run(batch_argv(inputs, outputs), capsys)
    assert status == 0
    assert [task_of(request) for request in model.requests] == ["Answer 20"]
    assert f"line 2 of {inputs} changed since its result was written: it runs again" in err
    assert "1 result(s) in" in err and "match no input" in err
    assert "1 of 3 inputs to run (2 already in" in err
    assert "done                3 (100.0%)" in out
    assert output_contexts(outputs)[-1] == (1, 20)
    last = json.loads(outputs.read_text().splitlines()[-1])
    assert last["step"]["output"] == {"value": 40}


def test_a_reordered_input_file_reuses_every_result_by_its_context(
    model: ScriptedServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    inputs = write_inputs(tmp_path / "in.jsonl", *({"question": n} for n in (1, 2, 3)))
    outputs = tmp_path / "out.jsonl"
    model.script(*[doubled] * 3)
    assert run(batch_argv(inputs, outputs), capsys)[0] == 0
    write_inputs(inputs, {"question": 3}, {"question": 1}, {"question": 2}, {"question": 4})
    model.requests.clear()
    model.script(doubled)
    status, _, err = run(batch_argv(inputs, outputs), capsys)
    assert status == 0
    assert [task_of(request) for request in model.requests] == ["Answer 4"]
    assert "changed" not in err and "match no input" not in err
    assert output_contexts(outputs)[-1] == (3, 4)


def test_duplicate_inputs_each_get_a_run_of_their_own(
    model: ScriptedServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    inputs = write_inputs(tmp_path / "in.jsonl", {"question": 5})
    outputs = tmp_path / "out.jsonl"
    model.script(doubled)
    assert run(batch_argv(inputs, outputs), capsys)[0] == 0
    write_inputs(inputs, {"question": 5}, {"question": 5})
    model.requests.clear()
    model.script(doubled)
    status, _, err = run(batch_argv(inputs, outputs), capsys)
    assert status == 0
    assert len(model.requests) == 1
    assert "1 of 2 inputs to run" in err
    assert output_contexts(outputs) == [(0, 5), (1, 5)]


def test_rerun_failed_runs_only_the_failed_inputs_again_and_the_new_result_counts(
    model: ScriptedServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    inputs = write_inputs(tmp_path / "in.jsonl", {"question": 1}, {"question": 2})
    outputs = tmp_path / "out.jsonl"
    model.script(doubled, reply("no idea"))
    assert run(batch_argv(inputs, outputs), capsys)[0] == 1
    model.requests.clear()
    assert run(batch_argv(inputs, outputs), capsys)[0] == 1  # resumed: nothing to run
    assert model.requests == []

    model.script(doubled)
    status, out, err = run(batch_argv(inputs, outputs, "--rerun-failed"), capsys)
    assert status == 0
    assert [task_of(request) for request in model.requests] == ["Answer 2"]
    assert f"line 2 of {inputs} run again (--rerun-failed)" in err
    assert "done                2 (100.0%)" in out
    model.requests.clear()
    assert run(batch_argv(inputs, outputs), capsys)[0] == 0  # the newer line wins
    assert model.requests == []


def test_rerun_retryable_reruns_transient_failures_but_not_other_failures(
    model: ScriptedServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    inputs = write_inputs(tmp_path / "in.jsonl", {"question": 1}, {"question": 2})
    outputs = tmp_path / "out.jsonl"
    model.script(Reply.error(401, "bad key"), *[Reply.error(503, "busy")] * 3)
    status, _, err = run(batch_argv(inputs, outputs), capsys)
    assert status == 1
    assert "1 run(s) failed retryably: the same command with --rerun-retryable runs" in err
    steps = [Step.model_validate(json.loads(line)["step"])
             for line in outputs.read_text().splitlines()]  # fmt: skip
    assert [step.retryable for step in steps] == [False, True]
    model.requests.clear()
    model.script(doubled)
    status, _, _ = run(batch_argv(inputs, outputs, "--rerun-retryable"), capsys)
    assert [task_of(request) for request in model.requests] == ["Answer 2"]
    assert status == 1  # the authentication failure stays


# --- files: partial lines, line ends, encodings, limits, strict JSON ---


def test_resume_after_a_kill_inside_a_multibyte_character_drops_the_part_line(
    model: ScriptedServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    inputs = write_inputs(tmp_path / "in.jsonl", {"question": 1}, {"question": 2})
    outputs = tmp_path / "out.jsonl"
    model.script(doubled)
    assert run(batch_argv(inputs, outputs), capsys)[0] == 1  # the second found no reply
    whole = outputs.read_bytes().split(b"\n")[0] + b"\n"
    outputs.write_bytes(whole + '{"index": 1, "step": {"output": "é'.encode()[:-1])
    model.requests.clear()
    model.script(doubled)
    status, _, err = run(batch_argv(inputs, outputs), capsys)
    assert status == 0, err
    assert "1 of 2 inputs to run (1 already in" in err
    assert [task_of(request) for request in model.requests] == ["Answer 2"]
    assert output_contexts(outputs) == [(0, 1), (1, 2)]


def test_input_lines_split_at_newlines_only_so_unicode_separators_stay_in_strings(
    model: ScriptedServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    inputs = tmp_path / "in.jsonl"
    inputs.write_bytes('{"question": "a\u2028b\u2029c\u0085d 1"}\r\n{"question": 2}\n'.encode())
    model.script(doubled, doubled)
    status, _, err = run(batch_argv(inputs, tmp_path / "out.jsonl"), capsys)
    assert status == 0, err
    assert task_of(model.requests[0]) == "Answer a\u2028b\u2029c\u0085d 1"
    assert len(model.requests) == 2


def test_a_byte_order_mark_is_accepted_in_input_and_context_files(
    model: ScriptedServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    inputs, context = tmp_path / "in.jsonl", tmp_path / "context.json"
    inputs.write_bytes(b'\xef\xbb\xbf{"question": 1}\n')
    context.write_bytes(b'\xef\xbb\xbf{"question": "6*7"}')
    model.script(doubled, reply('{"value": 42}'))
    assert run(batch_argv(inputs, tmp_path / "out.jsonl"), capsys)[0] == 0
    assert run(["run", "cli_agents:answer", "--context", f"@{context}"], capsys)[0] == 0
    assert task_of(model.requests[1]) == "Answer 6*7"


def test_a_context_is_read_from_stdin_after_at_dash(
    model: ScriptedServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    stdin = io.TextIOWrapper(io.BytesIO(b'{"question": "from stdin"}'))
    monkeypatch.setattr(sys, "stdin", stdin)
    model.script(reply('{"value": 1}'))
    status, _, _ = run(["run", "cli_agents:answer", "--context", "@-"], capsys)
    assert status == 0
    assert task_of(model.requests[0]) == "Answer from stdin"


def test_unreadable_files_and_values_exit_2_naming_the_argument(
    model: ScriptedServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    latin1 = tmp_path / "latin1.jsonl"
    latin1.write_bytes(b'{"question": 1}\n{"question": "caf\xe9"}\n')
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    good = write_inputs(tmp_path / "in.jsonl", {"question": 1})
    nan = tmp_path / "nan.jsonl"
    nan.write_text('{"question": 1}\n{"question": NaN}\n{"question": -Infinity}\n')
    cases = [
        (batch_argv(latin1, tmp_path / "o.jsonl"),
         "--input: line 2: not UTF-8 (invalid continuation byte at byte 17)"),
        (["run", "cli_agents:answer", "--context", f"@{latin1}"],
         f"--context @{latin1}: not UTF-8"),
        (batch_argv(good, not_a_folder / "out.jsonl"),
         f"--output: cannot write '{not_a_folder / 'out.jsonl'}'"),
        (batch_argv(good, tmp_path), f"--output: cannot read '{tmp_path}'"),
        (batch_argv(nan, tmp_path / "o.jsonl"),
         "--input: line 2: NaN is not JSON (write it as a string or null)"),
        (["run", "cli_agents:answer", "--context", '{"question": Infinity}'],
         "--context: Infinity is not JSON"),
    ]  # fmt: skip
    for argv, message in cases:
        status, out, err = run(argv, capsys)
        assert status == 2, (argv, err)
        assert message in err, err
        assert "Traceback" not in err and out == ""
    assert model.requests == []


def test_a_context_from_an_endless_file_stops_at_the_documented_limit(
    model: ScriptedServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    status, _, err = run(["run", "cli_agents:answer", "--context", "@/dev/zero"], capsys)
    assert status == 2
    assert "--context @/dev/zero: larger than the limit of 16 MiB" in err
    assert _reading.MAX_INPUT_BYTES == 16 * 1024 * 1024
    endless_line = tmp_path / "in.jsonl"
    with endless_line.open("wb") as file:
        file.write(b'{"question": "' + b"a" * (_reading.MAX_INPUT_BYTES + 10))
    status, _, err = run(batch_argv(endless_line, tmp_path / "o.jsonl"), capsys)
    assert status == 2
    assert "--input: line 1 is longer than the limit of 16 MiB" in err


# --- which model: explicit beats implicit, and said on stderr ---


def test_the_agents_own_model_wins_over_the_environment_and_is_named(
    model: ScriptedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = run(["run", "cli_agents:own_model", "--context", '{"question": "x"}'],
                           capsys)  # fmt: skip
    assert status == 0
    assert "output: Answer(value=42)" in out
    assert model.requests == []
    assert "model: forty-two (the agent's own llm=)" in err.splitlines()


def test_a_run_that_paused_for_approval_exits_4_naming_the_waiting_calls(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    for name in ("SUBAGENT_LLM", "OPENAI_BASE_URL", "OPENAI_MODEL"):
        monkeypatch.delenv(name, raising=False)
    argv = ["run", "cli_agents:needs_approval", "--context", '{"question": "x"}']
    status, out, _ = run(argv, capsys)
    assert status == _status.EXIT_PAUSED == 4
    assert "paused (1 call(s) awaiting approval) in 1 turn (normal)" in out
    assert 'awaiting approval: deploy {"env": "prod"} (call d1)' in out.splitlines()
    status, out, _ = run([*argv, "--json"], capsys)
    assert status == 4
    step = Step.model_validate_json(out)
    assert step.paused and step.state is not None and step.state.phase == "paused"
    inputs, outputs = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inputs.write_text('{"question": "a"}\n{"question": "b"}\n', encoding="utf-8")
    status, out, _ = run(batch_argv(inputs, outputs, agent="needs_approval"), capsys)
    assert status == 4
    assert re.search(r"paused\s+2 \(awaiting approval\)", out)


def test_the_llm_flag_wins_over_the_agents_own_model(
    model: ScriptedServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SUBAGENT_LLM")
    model.script(reply('{"value": 7}'))
    status, out, err = run(["run", "cli_agents:own_model", "--context", '{"question": "x"}',
                            "--llm", f"openai:flagged@{model.base_url}"], capsys)  # fmt: skip
    assert status == 0
    assert "output: Answer(value=7)" in out
    assert model.requests[0].json["model"] == "flagged"
    assert f"model: flagged at {model.base_url} (--llm)" in err.splitlines()
    status, _, err = run(["run", "cli_agents:answer", "--context", '{"question": "x"}', "--llm",
                          "nonsense"], capsys)  # fmt: skip
    assert status == 2
    assert "--llm: expected 'openai:MODEL'" in err


def test_the_model_line_never_shows_a_key_or_url_credentials(
    model: ScriptedServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with_secrets = model.base_url.replace("http://", "http://user:pw-0123456789@")
    monkeypatch.setenv("SUBAGENT_LLM", f"openai:served-model@{with_secrets}?key=k-0123456789")
    model.script(reply('{"value": 3}'))
    status, _, err = run(["run", "cli_agents:answer", "--context", '{"question": "1"}'], capsys)
    assert status == 0
    assert f"model: served-model at {model.base_url} (SUBAGENT_LLM)" in err.splitlines()
    assert "0123456789" not in err


# --- --trace console|otlp ---


def test_trace_console_prints_the_tree_even_when_an_otlp_endpoint_is_set(
    model: ScriptedServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    model.script(reply('{"value": 3}'))
    for flags in (["--trace"], ["--trace", "console"]):
        model.script(reply('{"value": 3}'))
        status, _, err = run(["run", "cli_agents:answer", "--context", '{"question": "1"}',
                              *flags], capsys)  # fmt: skip
        assert status == 0
        assert any(line.startswith("invoke_agent answer  done") for line in err.splitlines())
        assert "exported" not in err


def test_trace_otlp_says_exported_only_when_the_receiver_took_the_spans(
    model: ScriptedServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = ["run", "cli_agents:answer", "--context", '{"question": "1"}', "--trace", "otlp"]
    with http_receiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        model.script(reply('{"value": 3}'))
        status, _, err = run(argv, capsys)
        assert status == 0
        target = f"{receiver.endpoint}/v1/traces (OTLP/http/protobuf)"
        assert f"3 spans exported to {target}" in err.splitlines()
        assert {span.name for _, _, span in receiver.spans()} == {
            "invoke_agent answer", "agent_turn must_return", "chat served-model"
        }  # fmt: skip
        assert "invoke_agent" not in err  # no tree

        wrong = f"{receiver.endpoint}/nowhere"  # the receiver answers 404
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", wrong)
        model.script(reply('{"value": 3}'))
        status, _, err = run(argv, capsys)
        assert status == 0  # the run's outcome; the export's is said on stderr
        assert (f"--trace otlp: exporting 3 spans to {wrong} (OTLP/http/protobuf) failed: "
                "the receiver was unreachable or refused them") in err  # fmt: skip
        assert "spans exported" not in err


def test_trace_otlp_without_an_endpoint_is_bad_usage(
    model: ScriptedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, err = run(["run", "cli_agents:answer", "--context", '{"question": "x"}', "--trace",
                          "otlp"], capsys)  # fmt: skip
    assert status == 2
    assert "--trace otlp: no receiver: set OTEL_EXPORTER_OTLP_ENDPOINT" in err
    assert model.requests == []


# --- the rough edges: the local model, usage, --version, model flags ---


class FakeServer:
    """What ``local_model.start`` returns, for a server that is already there."""

    def __init__(self, base_url: str, stopped: list[str]) -> None:
        self.base_url = base_url
        self._stopped = stopped

    def stop(self) -> None:
        self._stopped.append(self.base_url)


def stub_local_model(
    monkeypatch: pytest.MonkeyPatch, base_url: str, stopped: list[str] | None = None
) -> list[str]:
    """``subagent.local_model.start`` replaced: nothing built or started; the names asked."""
    started: list[str] = []

    def start(name: str) -> FakeServer:
        started.append(name)
        return FakeServer(base_url, stopped if stopped is not None else [])

    monkeypatch.setattr(local_model, "start", start)
    return started


def test_no_model_asks_for_local_model_instead_of_building_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("SUBAGENT_LLM", "OPENAI_BASE_URL", "OPENAI_MODEL"):
        monkeypatch.delenv(name, raising=False)
    started = stub_local_model(monkeypatch, "http://127.0.0.1:9/v1")
    status, _, err = run(["run", "cli_agents:answer", "--context", '{"question": "x"}'],
                         capsys)  # fmt: skip
    assert status == 2
    assert "or --local-model qwen to build (minutes, the first time) and start" in err
    assert started == []


def test_local_model_flag_starts_the_local_model_says_so_and_stops_it(
    server: ScriptedServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("SUBAGENT_LLM", "OPENAI_BASE_URL", "OPENAI_MODEL"):
        monkeypatch.delenv(name, raising=False)
    stopped: list[str] = []
    started = stub_local_model(monkeypatch, server.base_url, stopped)
    server.script(reply('{"value": 3}'))
    status, _, err = run(["run", "cli_agents:answer", "--context", '{"question": "x"}',
                          "--local-model", "smollm2"], capsys)  # fmt: skip
    assert status == 0
    assert started == ["smollm2"] and stopped == [server.base_url]
    assert "starting the local model 'smollm2'" in err
    assert f"model: local at {server.base_url} (--local-model smollm2)" in err.splitlines()
    assert server.requests[0].json["model"] == local_model.MODEL_ALIAS


@pytest.mark.parametrize("name", list(local_model.MODELS))
def test_local_model_accepts_every_model_the_launcher_knows(
    name: str,
    server: ScriptedServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for variable in ("SUBAGENT_LLM", "OPENAI_BASE_URL", "OPENAI_MODEL"):
        monkeypatch.delenv(variable, raising=False)
    started = stub_local_model(monkeypatch, server.base_url)
    server.script(reply('{"value": 3}'))
    status, _, err = run(["run", "cli_agents:answer", "--context", '{"question": "x"}',
                          "--local-model", name], capsys)  # fmt: skip
    assert status == 0, err
    assert started == [name]


def test_a_local_model_that_cannot_be_set_up_is_bad_usage_naming_the_flag(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("SUBAGENT_LLM", "OPENAI_BASE_URL", "OPENAI_MODEL"):
        monkeypatch.delenv(name, raising=False)

    def start(name: str) -> FakeServer:
        raise local_model.SetupError("command failed with exit status 1: cmake")

    monkeypatch.setattr(local_model, "start", start)
    status, out, err = run(["run", "cli_agents:answer", "--context", '{"question": "x"}',
                            "--local-model", "qwen"], capsys)  # fmt: skip
    assert status == 2 and out == ""
    assert "subagent run: error: --local-model qwen: command failed with exit status 1" in err
    assert "Traceback" not in err


def test_an_unknown_flag_prints_the_subcommands_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["batch", "cli_agents:answer", "--input", "i", "--output", "o", "--bogus"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: subagent batch ")
    assert "subagent batch: error: unrecognized arguments: --bogus" in err


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"subagent {subagent.__version__}\n"


def test_model_setting_and_timeout_flags_reach_the_run(
    model: ScriptedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    model.script(reply('{"value": 3}'))
    status, _, _ = run(["run", "cli_agents:answer", "--context", '{"question": "1"}',
                        "--temperature", "0.25", "--max-tokens", "50", "--timeout", "30",
                        "--mission-timeout", "60"], capsys)  # fmt: skip
    assert status == 0
    body = model.requests[0].json
    assert (body["temperature"], body["max_tokens"]) == (0.25, 50)
    for flag, value in (("--timeout", "0"), ("--mission-timeout", "-1"), ("--max-tokens", "0")):
        status, _, err = run(["run", "cli_agents:answer", flag, value], capsys)
        assert status == 2
        assert f"error: {flag}: " in err


def test_protocol_flag_chooses_how_tools_travel(
    model: ScriptedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    first = []
    for protocol in ("native", "react"):
        model.requests.clear()
        model.script(reply("not yet"), reply("still not"))
        argv = ["run", "cli_agents:with_tool", "--context", '{"question": "1"}', "--max-turns",
                "2", "--protocol", protocol]  # fmt: skip
        status, out, err = run(argv, capsys)
        assert status == 1, out + err  # two invalid replies
        first.append(model.requests[0].json)
    native, react = first
    assert [tool["function"]["name"] for tool in native["tools"]] == ["add"]
    assert "tools" not in react
    assert "add" in react["messages"][0]["content"]


def test_matching_results_to_a_reordered_input_grows_linearly() -> None:
    step = cli_agents.own_model.run_sync({"question": "x"})

    def seconds(size: int) -> float:
        """The best of three, without the collector: the matching's own growth."""
        inputs = [_batch_files.Input(n + 1, {}, f"key {n}") for n in range(size)]
        # reversed
        results = [_batch_files.Result(size - 1 - n, f"key {n}", step) for n in range(size)]
        best = math.inf
        for _ in range(3):
            gc.collect()
            gc.disable()
            try:
                started = time.perf_counter()
                plan = _batch_files.plan_batch(inputs, results)
                best = min(best, time.perf_counter() - started)
            finally:
                gc.enable()
            assert plan.pending == [] and plan.stale == 0 and plan.changed == []
        return best

    # 100x the lines: linear is ~100x (~250x with cache misses), quadratic ~10,000x.
    assert seconds(100_000) / seconds(1_000) < 2_000
