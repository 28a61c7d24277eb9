"""``subagent resume`` and a batch's paused lines: approve, deny or edit each waiting call.

The agents (``tests/cli_agents.py``) have models of their own that read the conversation,
so a run paused by one process resumes in another: ``approval_flow`` asks to deploy to
``prod`` (call d1) and ``eu-west`` (call d2), then reports the tools' results;
``needs_approval`` asks to deploy to ``prod`` at every turn.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import run_example

from subagent import RunState, SQLiteClaims, Step, cli
from subagent.cli import _show, _status
from subagent.llm import ToolCall

TESTS = Path(__file__).resolve().parent
CONTEXT = '{"question": "the release"}'


@pytest.fixture(autouse=True)
def deployed(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The deployments of this test, from none; the agents' own models serve.

    The list of the module the command line loads as ``cli_agents`` (another test loads it
    from its file, which replaces the module of that name).
    """
    for name in ("SUBAGENT_LLM", "OPENAI_BASE_URL", "OPENAI_MODEL"):
        monkeypatch.delenv(name, raising=False)
    made: list[str] = importlib.import_module("cli_agents").DEPLOYED
    made.clear()
    yield made
    made.clear()


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = cli.main(argv)
    out, err = capsys.readouterr()
    return status, out, err


def paused_state(agent: str, path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """``subagent run --json`` of a run that pauses, saved to ``path``, as a user does."""
    status, out, _ = run(["run", f"cli_agents:{agent}", "--context", CONTEXT, "--json"], capsys)
    assert status == _status.EXIT_PAUSED
    path.write_text(out, encoding="utf-8")
    return path


# --- subagent resume ---


def test_resume_approves_one_call_and_denies_another_with_a_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], deployed: list[str]
) -> None:
    state = paused_state("approval_flow", tmp_path / "state.json", capsys)
    assert deployed == []  # paused before any call ran
    status, out, err = run(["resume", "cli_agents:approval_flow", str(state), "--approve", "d1",
                            "--deny", "d2=eu-west is frozen this week"], capsys)  # fmt: skip
    assert status == _status.EXIT_DONE, err
    assert deployed == ["prod"]
    lines = out.splitlines()
    assert lines[1].split()[:3] == ["1", "normal", "error"]  # the paused turn, a call denied
    assert lines[1].endswith("deploy: denied")
    assert lines[3] == "done in 2 turns (normal, normal)"
    assert "deployed to prod" in lines[4] and "eu-west is frozen this week" in lines[4]


def test_resume_runs_an_edited_call_with_the_new_arguments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], deployed: list[str]
) -> None:
    state = paused_state("approval_flow", tmp_path / "state.json", capsys)
    status, out, _ = run(["resume", "cli_agents:approval_flow", str(state), "--approve", "d1",
                          "--edit", 'd2={"env": "staging"}', "--json"], capsys)  # fmt: skip
    assert status == 0
    assert deployed == ["prod", "staging"]
    step = Step[str].model_validate_json(out)
    assert step.ok and step.state is None
    decided = step.turns[0].decisions
    assert decided["d2"].action == "edit" and decided["d2"].arguments == {"env": "staging"}
    assert step.turns[0].tool_calls[1].arguments == {"env": "eu-west"}  # the model's own


def test_the_turn_table_marks_an_edited_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], deployed: list[str]
) -> None:
    state = paused_state("approval_flow", tmp_path / "state.json", capsys)
    status, out, _ = run(["resume", "cli_agents:approval_flow", str(state), "--approve", "d1",
                          "--edit", 'd2={"env": "staging"}'], capsys)  # fmt: skip
    assert status == 0
    paused_turn = out.splitlines()[1]
    assert paused_turn.endswith("called deploy, deploy (edited)")


def test_decisions_come_from_a_file_or_stdin_as_decision_json_or_booleans(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    deployed: list[str],
) -> None:
    state = paused_state("approval_flow", tmp_path / "state.json", capsys)
    decisions = tmp_path / "decisions.json"
    decisions.write_text(json.dumps({"d1": True, "d2": {"action": "deny", "reason": "no"}}))
    status, out, _ = run(["resume", "cli_agents:approval_flow", str(state), "--decisions",
                          str(decisions)], capsys)  # fmt: skip
    assert status == 0 and deployed == ["prod"]
    # The state from stdin, as `subagent run --json | subagent resume ... -` pipes it.
    monkeypatch.setattr(sys, "stdin", open(state, encoding="utf-8"))  # noqa: SIM115
    status, again, _ = run(["resume", "cli_agents:approval_flow", "-", "--decisions",
                            str(decisions)], capsys)  # fmt: skip
    sys.stdin.close()
    assert status == 0 and again.splitlines()[3:] == out.splitlines()[3:]


def test_a_bare_run_state_resumes_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], deployed: list[str]
) -> None:
    step = Step.model_validate_json(
        paused_state("approval_flow", tmp_path / "step.json", capsys).read_text()
    )
    assert step.state is not None
    state = tmp_path / "state.json"
    state.write_text(step.state.model_dump_json())
    status, _, _ = run(["resume", "cli_agents:approval_flow", str(state), "--approve", "d1",
                        "--approve", "d2"], capsys)  # fmt: skip
    assert status == 0 and deployed == ["prod", "eu-west"]


def test_a_waiting_call_without_a_decision_is_bad_usage_listing_each_with_its_arguments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], deployed: list[str]
) -> None:
    state = paused_state("approval_flow", tmp_path / "state.json", capsys)
    for flags in ([], ["--approve", "d1"]):
        status, out, err = run(["resume", "cli_agents:approval_flow", str(state), *flags], capsys)
        assert status == _status.EXIT_USAGE and out == ""
        assert "need a decision (--approve ID, --deny ID=REASON or --edit ID=JSON)" in err
        assert 'deploy {"env": "eu-west"} (call d2)' in err
        assert ('deploy {"env": "prod"} (call d1)' in err) is (flags == [])
    assert deployed == []  # nothing ran


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--approve", "d1", "--approve", "d2", "--deny", "d9"],
         "--deny d9: no call of STATE waits for approval with the id 'd9'; waiting: deploy "
         '{"env": "prod"} (call d1); deploy {"env": "eu-west"} (call d2)'),
        (["--approve", "d1", "--deny", "d1=no"],
         "--deny d1: call 'd1' is already decided (--approve d1)"),
        (["--approve", "d1", "--edit", "d2"], "--edit d2: expected ID=JSON"),
        (["--approve", "d1", "--edit", "d2=[1]"],
         "--edit d2: must be a JSON object, got list"),
        (["--approve", "d1", "--edit", "d2={env}"], "--edit d2: not JSON"),
        (["--approve", ""], "--approve : names no call"),
        (["--decisions", "/nowhere.json"], "--decisions /nowhere.json: cannot read"),
    ],
)  # fmt: skip
def test_bad_decisions_are_bad_usage_naming_the_flag(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
    message: str,
    deployed: list[str],
) -> None:
    state = paused_state("approval_flow", tmp_path / "state.json", capsys)
    status, out, err = run(["resume", "cli_agents:approval_flow", str(state), *flags], capsys)
    assert status == 2 and out == ""
    assert f"subagent resume: error: {message}" in err
    assert deployed == []


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{nope", "STATE {path}: not JSON"),
        ('{"state": {"agent": "x"}}', "STATE {path}: state: not a RunState ("),
        ('{"agent": "x", "fingerprint": {}}', "STATE {path}: not a RunState ("),
        ('{"d1": {"action": "maybe"}}', "STATE {path}: not a RunState ("),
    ],
)
def test_a_state_file_that_is_not_a_state_is_bad_usage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    path = tmp_path / "state.json"
    path.write_text(content)
    status, _, err = run(["resume", "cli_agents:approval_flow", str(path)], capsys)
    assert status == 2
    assert message.format(path=path) in err


def test_decisions_in_a_file_are_checked_like_decisions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = paused_state("approval_flow", tmp_path / "state.json", capsys)
    decisions = tmp_path / "decisions.json"
    decisions.write_text('{"d1": true, "d2": {"action": "edit"}}')
    status, _, err = run(["resume", "cli_agents:approval_flow", str(state), "--decisions",
                          str(decisions)], capsys)  # fmt: skip
    assert status == 2
    assert f"--decisions {decisions}: call 'd2': Value error, an 'edit' decision needs" in err
    decisions.write_text('{"d1": true, "d2": "yes"}')
    status, _, err = run(["resume", "cli_agents:approval_flow", str(state), "--decisions",
                          str(decisions)], capsys)  # fmt: skip
    assert status == 2
    assert "call 'd2': expected a decision" in err and "got str" in err


def test_a_finished_step_or_another_agents_state_is_refused_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], deployed: list[str]
) -> None:
    state = paused_state("approval_flow", tmp_path / "state.json", capsys)
    status, _, err = run(["resume", "cli_agents:needs_approval", str(state), "--approve", "d1",
                          "--approve", "d2"], capsys)  # fmt: skip
    assert status == 2
    assert ("STATE: cannot resume this state: agent differs: the state is of agent "
            "'approval_flow', not 'needs_approval'") in err  # fmt: skip
    status, out, _ = run(["resume", "cli_agents:approval_flow", str(state), "--approve", "d1",
                          "--approve", "d2", "--json"], capsys)  # fmt: skip
    done = tmp_path / "done.json"
    done.write_text(out)
    status, _, err = run(["resume", "cli_agents:approval_flow", str(done), "--approve", "d1"],
                         capsys)  # fmt: skip
    assert status == 2
    assert f"STATE {done}: the Step has no state to resume: it ended done" in err
    assert deployed == ["prod", "eu-west"]  # once, by the resume that ran


def test_a_run_that_pauses_again_exits_4_and_then_fails_with_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], deployed: list[str]
) -> None:
    state = paused_state("needs_approval", tmp_path / "1.json", capsys)
    argv = ["resume", "cli_agents:needs_approval", "--approve", "d1", "--json"]
    status, out, _ = run([*argv, str(state)], capsys)
    assert status == _status.EXIT_PAUSED  # the model asked again: a new pause, its state printed
    again = Step.model_validate_json(out)
    assert again.paused and again.state is not None and len(again.turns) == 2
    (tmp_path / "2.json").write_text(out)
    status, out, _ = run([*argv, str(tmp_path / "2.json")], capsys)
    assert status == _status.EXIT_FAILED  # must_return: the model keeps calling a tool
    assert Step.model_validate_json(out).failure is not None
    assert deployed == ["prod", "prod"]


def test_a_resumed_run_whose_code_raises_exits_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = paused_state("approval_broken", tmp_path / "state.json", capsys)
    status, out, err = run(["resume", "cli_agents:approval_broken", str(state), "--approve",
                            "d1", "--approve", "d2"], capsys)  # fmt: skip
    assert status == _status.EXIT_ERROR and out == ""
    assert ("subagent resume: error in the agent or code it runs: ParserContractError: parser "
            "'broken_parser' raised RuntimeError: the parser has a bug") in err  # fmt: skip


def test_resume_trace_prints_the_resumed_parts_span_tree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = paused_state("approval_flow", tmp_path / "state.json", capsys)
    status, _, err = run(["resume", "cli_agents:approval_flow", str(state), "--approve", "d1",
                          "--approve", "d2", "--trace"], capsys)  # fmt: skip
    assert status == 0
    tree = [line for line in err.splitlines() if " ms" in line]
    assert tree[0].startswith("invoke_agent approval_flow  done")
    assert [line.split()[1:3] for line in tree if "agent_turn" in line] == [
        ["agent_turn", "normal"], ["agent_turn", "normal"]
    ]  # fmt: skip
    assert sum("execute_tool deploy" in line for line in tree) == 2


def test_the_whole_flow_through_real_processes(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get(
        "PYTHONPATH", "")])}  # fmt: skip
    for name in ("SUBAGENT_LLM", "OPENAI_BASE_URL", "OPENAI_MODEL"):
        env.pop(name, None)

    def subagent(*argv: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "subagent", *argv], input=stdin,
                              capture_output=True, text=True, env=env, cwd=tmp_path,
                              timeout=60, check=False)  # fmt: skip

    paused = subagent("run", "cli_agents:approval_flow", "--context", CONTEXT, "--json")
    assert paused.returncode == 4, paused.stderr
    undecided = subagent("resume", "cli_agents:approval_flow", "-", stdin=paused.stdout)
    assert undecided.returncode == 2
    assert "Traceback" not in undecided.stderr
    done = subagent("resume", "cli_agents:approval_flow", "-", "--approve", "d1", "--deny",
                    "d2=frozen", stdin=paused.stdout)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "done in 2 turns (normal, normal)" in done.stdout
    assert "deployed to prod" in done.stdout and "frozen" in done.stdout


# --- the pause line ---


def test_the_pause_line_shows_the_arguments_an_approver_approves(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, out, _ = run(["run", "cli_agents:approval_flow", "--context", CONTEXT], capsys)
    assert status == 4
    assert out.splitlines()[-2:] == [
        'awaiting approval: deploy {"env": "prod"} (call d1)',
        'awaiting approval: deploy {"env": "eu-west"} (call d2)',
    ]


def test_the_pause_line_escapes_what_could_hide_what_runs() -> None:
    call = ToolCall(id="d 1\x1b", name="deploy", arguments={"env": "pro\u202ed", "x": "\x1b[2K"})
    line = _show.call_line(call)
    assert line == r'deploy {"env": "pro\u202ed", "x": "\u001b[2K"} (call "d 1\u001b")'
    assert line.isascii() and line.isprintable()
    assert _show.call_line(ToolCall(id="c", name="f", arguments="{not json")) == (
        'f "{not json" (call c)'
    )


# --- a batch's paused lines: reported at every run, resumed with --decisions ---


def batch(inputs: Path, outputs: Path, *flags: str, agent: str = "approval_flow") -> list[str]:
    return ["batch", f"cli_agents:{agent}", "--input", str(inputs), "--output", str(outputs),
            "--concurrency", "2", *flags]  # fmt: skip


def inputs_file(path: Path, count: int) -> Path:
    path.write_text("".join(json.dumps({"question": n}) + "\n" for n in range(count)))
    return path


def latest_steps(outputs: Path) -> dict[int, Step[str]]:
    steps: dict[int, Step[str]] = {}
    for line in outputs.read_text().splitlines():  # a later line supersedes an earlier one
        record = json.loads(line)
        steps[record["index"]] = Step[str].model_validate(record["step"])
    return steps


def test_a_paused_line_is_reported_at_every_run_of_the_batch_never_skipped_silently(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inputs, outputs = inputs_file(tmp_path / "in.jsonl", 2), tmp_path / "out.jsonl"
    for _ in range(2):  # the run that paused them, then a re-run
        status, out, err = run(batch(inputs, outputs), capsys)
        assert status == _status.EXIT_PAUSED
        assert re.search(r"paused\s+2 \(awaiting approval\)", out)
        assert (f"2 run(s) paused awaiting approval (lines 1, 2 of {inputs}): decide their "
                "calls in a file") in err  # fmt: skip
        assert "run the same command with --decisions FILE to resume them" in err
        assert '  line 2: deploy {"env": "eu-west"} (call d2)' in err.splitlines()
    assert len(outputs.read_text().splitlines()) == 2  # the re-run ran nothing again


def test_batch_decisions_resume_the_decided_lines_and_append_their_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], deployed: list[str]
) -> None:
    inputs, outputs = inputs_file(tmp_path / "in.jsonl", 3), tmp_path / "out.jsonl"
    assert run(batch(inputs, outputs), capsys)[0] == 4
    decisions = tmp_path / "decisions.json"
    decisions.write_text(json.dumps({
        "1": {"d1": True, "d2": False},
        "3": {"d1": {"action": "approve"}, "d2": {"action": "edit",
                                                  "arguments": {"env": "staging"}}},
    }))  # fmt: skip
    status, out, err = run(batch(inputs, outputs, "--decisions", str(decisions)), capsys)
    assert status == _status.EXIT_PAUSED  # line 2 is still waiting
    assert "2 paused run(s) to resume (--decisions)" in err
    assert re.search(r"done\s+2 \(66.7%\)", out) and re.search(r"paused\s+1 \(await", out)
    assert f"1 run(s) paused awaiting approval (line 2 of {inputs})" in err
    assert sorted(deployed) == ["prod", "prod", "staging"]
    steps = latest_steps(outputs)
    assert steps[0].ok and steps[2].ok and steps[1].paused
    assert "deployed to staging" in str(steps[2].output)
    assert len(outputs.read_text().splitlines()) == 5  # two lines appended

    deployed.clear()
    decisions.write_text(json.dumps({"1": {"d1": True, "d2": True},
                                     "2": {"d1": True, "d2": True}}))  # fmt: skip
    status, out, err = run(batch(inputs, outputs, "--decisions", str(decisions)), capsys)
    assert status == _status.EXIT_DONE, err
    assert f"--decisions {decisions}: line 1 of {inputs} is done, not paused: its decisions " \
        "are not used" in err  # fmt: skip
    assert deployed == ["prod", "eu-west"]  # line 2's, once
    assert re.search(r"done\s+3 \(100.0%\)", out)
    assert "paused awaiting approval" not in err


@pytest.mark.parametrize(
    ("decisions", "message"),
    [
        ({"7": {"d1": True}}, "'7' is not a line of {inputs} that holds an input"),
        ({"first": {"d1": True}}, "'first' is not a line of"),
        ({"1": ["d1"]}, 'line 1 of {inputs}: expected {{"CALL_ID": decision}}, got list'),
        ({"1": {"d1": True}}, "line 1 of {inputs}: 1 waiting call(s) need a decision"),
        ({"1": {"d1": True, "d2": True, "d3": True}},
         "no call of line 1 of {inputs} waits for approval with the id 'd3'"),
        ({"1": {"d1": True, "d2": "yes"}}, "line 1 of {inputs}: 'd2': expected a decision"),
    ],
)  # fmt: skip
def test_bad_batch_decisions_are_bad_usage_before_anything_runs(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    decisions: dict[str, object],
    message: str,
    deployed: list[str],
) -> None:
    inputs, outputs = inputs_file(tmp_path / "in.jsonl", 2), tmp_path / "out.jsonl"
    assert run(batch(inputs, outputs), capsys)[0] == 4
    before = outputs.read_text()
    path = tmp_path / "decisions.json"
    path.write_text(json.dumps(decisions))
    status, out, err = run(batch(inputs, outputs, "--decisions", str(path)), capsys)
    assert status == 2 and out == ""
    assert message.format(inputs=inputs) in err
    assert outputs.read_text() == before and deployed == []


def test_a_batch_line_paused_by_another_agent_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inputs, outputs = inputs_file(tmp_path / "in.jsonl", 1), tmp_path / "out.jsonl"
    assert run(batch(inputs, outputs), capsys)[0] == 4
    text = outputs.read_text().replace('"agent":"approval_flow"', '"agent":"other"')
    outputs.write_text(text)
    path = tmp_path / "decisions.json"
    path.write_text('{"1": {"d1": true, "d2": true}}')
    status, _, err = run(batch(inputs, outputs, "--decisions", str(path)), capsys)
    assert status == 2
    assert f"line 1 of {inputs}: cannot resume this state: agent differs" in err


def test_a_resumed_batch_line_that_raises_is_failed_error_and_the_others_go_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], deployed: list[str]
) -> None:
    inputs, outputs = inputs_file(tmp_path / "in.jsonl", 2), tmp_path / "out.jsonl"
    assert run(batch(inputs, outputs, agent="approval_broken"), capsys)[0] == 4
    path = tmp_path / "decisions.json"
    path.write_text('{"1": {"d1": true, "d2": false}, "2": {"d1": false, "d2": false}}')
    status, out, err = run(batch(inputs, outputs, "--decisions", str(path),
                                 agent="approval_broken"), capsys)  # fmt: skip
    assert status == _status.EXIT_ERROR
    assert re.search(r"error\s+2", out)
    assert "2 run(s) raised (failed(error), lines 1, 2 of" in err
    steps = latest_steps(outputs)
    assert all(step.failure is not None and step.failure.reason.value == "error"
               for step in steps.values())  # fmt: skip
    # Every turn kept: the paused one, with its decisions, and the one whose parser raised.
    assert [len(step.turns) for step in steps.values()] == [2, 2]
    assert [sorted(step.turns[0].decisions) for step in steps.values()] == [["d1", "d2"]] * 2
    assert deployed == ["prod"]


def test_the_approval_cli_example_denies_then_approves_across_processes() -> None:
    out = run_example("approval_cli.py").splitlines()
    assert [line for line in out if line.startswith(("exit", "awaiting", "done", "output"))] == [
        'awaiting approval: deploy {"env": "production"} (call deploy-production)',
        "exit status 4",
        'awaiting approval: deploy {"env": "staging"} (call deploy-staging)',
        "exit status 4",
        "done in 3 turns (normal, normal, normal)",
        "output: 'Release 1.4 is live on staging.'",
        "exit status 0",
    ]
    assert out[0] == "$ subagent run examples/approval_cli.py:AGENT --json > paused.json"


# --- signed states, single use and strict JSON -------------------------------------------


def signed_state(tmp_path: Path, capsys: pytest.CaptureFixture[str], key: bytes) -> Path:
    """A paused run's state signed with ``key``, as an application keeps it."""
    printed = paused_state("approval_flow", tmp_path / "step.json", capsys)
    state = RunState.model_validate(json.loads(printed.read_text())["state"])
    path = tmp_path / "signed.json"
    path.write_text(state.signed(key))
    return path


def test_a_signed_state_resumes_with_its_key_from_a_file_or_the_environment(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    deployed: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key = tmp_path / "state.key"
    key.write_bytes(b"the application's secret\n")
    state = signed_state(tmp_path, capsys, b"the application's secret")
    status, _, _ = run(["resume", "cli_agents:approval_flow", str(state), "--key-file",
                        str(key), "--approve", "d1", "--deny", "d2"], capsys)  # fmt: skip
    assert status == 0 and deployed == ["prod"]
    monkeypatch.setenv("STATE_KEY", "the application's secret")
    status, _, _ = run(["resume", "cli_agents:approval_flow", str(state), "--key-env",
                        "STATE_KEY", "--approve", "d1", "--deny", "d2"], capsys)  # fmt: skip
    assert status == 0 and deployed == ["prod", "prod"]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ([], "the state is signed: give its key with --key-file FILE or --key-env VAR"),
        (["--key-env", "ANOTHER_KEY"], "signature: does not match the key"),
        (["--key-env", "NO_SUCH_VARIABLE"], "--key-env NO_SUCH_VARIABLE: the key is empty"),
    ],
)
def test_a_signed_state_without_its_key_is_refused_and_nothing_runs(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    deployed: list[str],
    monkeypatch: pytest.MonkeyPatch,
    flags: list[str],
    message: str,
) -> None:
    monkeypatch.setenv("ANOTHER_KEY", "not the secret")
    monkeypatch.delenv("NO_SUCH_VARIABLE", raising=False)
    state = signed_state(tmp_path, capsys, b"the application's secret")
    status, out, err = run(["resume", "cli_agents:approval_flow", str(state), *flags,
                            "--approve", "d1", "--approve", "d2"], capsys)  # fmt: skip
    assert status == _status.EXIT_USAGE and out == "" and message in err
    assert "secret" not in err  # the key is never printed
    assert deployed == []


def test_a_changed_signed_state_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], deployed: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("STATE_KEY", "k")
    state = signed_state(tmp_path, capsys, b"k")
    state.write_text(state.read_text().replace("eu-west", "us-east"))
    status, _, err = run(["resume", "cli_agents:approval_flow", str(state), "--key-env",
                          "STATE_KEY", "--approve", "d1", "--approve", "d2"], capsys)  # fmt: skip
    assert status == _status.EXIT_USAGE and "signature: does not match the key" in err
    assert deployed == []


def test_with_claims_one_pause_resumes_once_from_any_copy_of_its_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], deployed: list[str]
) -> None:
    first = paused_state("approval_flow", tmp_path / "step.json", capsys)
    copy = tmp_path / "copy.json"
    copy.write_text(json.dumps(json.loads(first.read_text())["state"]))
    claims = tmp_path / "claims.sqlite"
    flags = ["--approve", "d1", "--approve", "d2", "--claims", str(claims)]
    status, _, _ = run(["resume", "cli_agents:approval_flow", str(first), *flags], capsys)
    assert status == 0 and deployed == ["prod", "eu-west"]
    status, out, err = run(["resume", "cli_agents:approval_flow", str(copy), *flags], capsys)
    assert status == _status.EXIT_USAGE and out == ""
    assert "was resumed already (single use)" in err
    assert deployed == ["prod", "eu-west"]  # once


def test_sqlite_claims_are_shared_by_every_store_on_one_file(tmp_path: Path) -> None:
    path = tmp_path / "claims.sqlite"
    one, other = SQLiteClaims(path), SQLiteClaims(path)
    assert [one.claim("a.1"), other.claim("a.1"), other.claim("a.2")] == [True, False, True]
    assert not SQLiteClaims(path).claim("a.2")


@pytest.mark.parametrize(
    ("content", "key"),
    [
        ('{"d1": false, "d2": true, "d1": true}', "d1"),
        ('{"d1": {"action": "deny", "action": "approve"}, "d2": true}', "action"),
    ],
)
def test_a_decisions_file_that_gives_a_key_twice_is_refused_and_nothing_runs(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    deployed: list[str],
    content: str,
    key: str,
) -> None:
    state = paused_state("approval_flow", tmp_path / "state.json", capsys)
    decisions = tmp_path / "decisions.json"
    decisions.write_text(content)
    status, _, err = run(["resume", "cli_agents:approval_flow", str(state), "--decisions",
                          str(decisions)], capsys)  # fmt: skip
    assert status == _status.EXIT_USAGE
    assert f"the key '{key}' is given twice in one object" in err
    assert deployed == []
