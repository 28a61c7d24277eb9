"""``subagent eval run / report / compare`` (subagent/evals/_cli.py), in process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from evals_models import BUG, Answer, sums

from subagent import cli
from subagent.evals import Case, Dataset
from subagent.evals._cli import EXIT_CRASHED


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    return sums(40).to_file(tmp_path / "sums.jsonl")


@pytest.fixture
def variants(tmp_path: Path) -> Path:
    path = tmp_path / "variants.json"
    path.write_text(json.dumps({"r0": {"return_retries": 0}, "r1": {"return_retries": 1}}))
    return path


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = cli.main(argv)
    out, err = capsys.readouterr()
    return status, out, err


def test_eval_run_records_every_run_and_prints_the_report(
    dataset: Path, variants: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "records.jsonl"
    argv = [
        "eval",
        "run",
        str(dataset),
        "--agent",
        "evals_models:half_right",
        "--variants",
        str(variants),
        "--out",
        str(out),
    ]
    status, printed, err = run(argv, capsys)
    assert status == 0, err
    assert len(out.read_text().splitlines()) == 80
    assert "| r1 | 40 | 100.0% [91-100]" in printed
    assert "**Recommended:** r1: 100%" in printed
    assert "dataset: sums, 40 cases" in err
    again, printed_again, _ = run(argv, capsys)  # everything recorded: nothing runs
    assert again == 0 and printed_again == printed
    assert len(out.read_text().splitlines()) == 80


def test_runs_that_raised_exit_3_name_the_error_recommend_nothing_and_rerun_when_asked(
    dataset: Path, variants: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "records.jsonl"
    argv = ["eval", "run", str(dataset), "--agent", "evals_models:buggy",
            "--variants", str(variants), "--out", str(out)]  # fmt: skip
    status, printed, err = run(argv, capsys)
    assert status == EXIT_CRASHED == 3
    assert "**80 of 80 runs never ran to a result**" in printed
    assert "ParserContractError" in printed and "the validator has a bug" in printed
    assert "Recommended" not in printed
    assert "--rerun-failed" in err
    again, _, _ = run(argv, capsys)  # the crashes are recorded: still no result, nothing run
    assert again == 3 and len(out.read_text().splitlines()) == 80

    BUG["in"] = False  # the bug fixed
    try:
        fixed, printed, _ = run([*argv, "--rerun-failed"], capsys)
    finally:
        BUG["in"] = True
    assert fixed == 0
    assert len(out.read_text().splitlines()) == 160  # the crashed runs made again
    assert "| r0 | 40 | 100.0%" in printed and "never ran" not in printed
    assert "**Recommended:** r0" in printed


def test_eval_run_takes_agents_by_name_and_a_judge_class(
    variants: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = [
        Case(name=f"{agent}-{n}", context={"a": n, "b": 2 * n}, expected=Answer(value=3 * n),
             agent=agent)
        for agent in ("adder", "worse")
        for n in range(10)
    ]  # fmt: skip
    dataset = Dataset(cases, name="two").to_file(tmp_path / "two.jsonl")
    out = tmp_path / "records.jsonl"
    argv = ["eval", "run", str(dataset), "--agent", "evals_models:AGENTS", "--judge",
            "evals_models:NotNegative", "--variants", str(variants), "--out", str(out)]  # fmt: skip
    status, printed, err = run(argv, capsys)
    assert status == 0, err
    records = [json.loads(line) for line in out.read_text().splitlines()]
    # each case ran its own agent: the adder's model is right after one correction, the
    # worse one's rarely
    right = {name: sum(r["correct"] for r in records
                       if r["variant"] == "r1" and r["case"].startswith(name))
             for name in ("adder", "worse")}  # fmt: skip
    assert right["adder"] == 10 > right["worse"]
    assert all(r["verdicts"][0]["judge"] == "not_negative" for r in records if r["verdicts"])
    assert "| r1 | 20 |" in printed
    bad = ["eval", "run", str(dataset), "--agent", "evals_models:sums", "--out", str(out)]
    status, _, err = run(bad, capsys)
    assert status == 2 and "not a SubAgent nor a mapping of names to agents" in err


def test_eval_report_prints_the_same_report_from_the_records_alone(
    dataset: Path, variants: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "records.jsonl"
    _, printed, _ = run(
        [
            "eval",
            "run",
            str(dataset),
            "--agent",
            "evals_models:half_right",
            "--variants",
            str(variants),
            "--out",
            str(out),
        ],
        capsys,
    )
    status, reported, _ = run(["eval", "report", str(out)], capsys)
    assert status == 0 and reported == printed
    status, as_json, _ = run(["eval", "report", str(out), "--json", "--margin", "0.5"], capsys)
    data = json.loads(as_json)
    assert status == 0 and [v["variant"] for v in data["variants"]] == ["r0", "r1"]
    # A wide margin is not enough: r0 is significantly worse than r1, so r1 it stays.
    assert data["recommendation"]["margin"] == 0.5 and data["recommendation"]["variant"] == "r1"


def test_eval_report_html_writes_the_page_with_the_runs_outputs(
    dataset: Path, variants: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "records.jsonl"
    argv = ["eval", "run", str(dataset), "--agent", "evals_models:half_right",
            "--variants", str(variants), "--out", str(out)]  # fmt: skip
    assert run(argv, capsys)[0] == 0
    page = tmp_path / "report.html"
    status, printed, err = run(["eval", "report", str(out), "--html", str(page)], capsys)
    assert status == 0 and f"html: {page}" in err and printed.startswith("## sums")
    text = page.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and "<script" not in text
    assert "<td>sum-39</td>" in text and "output: {&quot;value&quot;: 117}" in text
    status, _, err = run(["eval", "report", str(out), "--html", str(tmp_path)], capsys)
    assert status == 2 and "--html: cannot write" in err


def test_eval_compare_exits_1_on_a_significant_regression_and_0_without(
    dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good, bad = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    for agent, out in (("half_right", good), ("worse", bad)):
        run(
            ["eval", "run", str(dataset), "--agent", f"evals_models:{agent}", "--out", str(out)],
            capsys,
        )
    status, printed, _ = run(["eval", "compare", str(bad), "--baseline", str(good)], capsys)
    assert status == 1
    assert "Significant regression (alpha 0.05, Holm): default success" in printed
    status, printed, _ = run(["eval", "compare", str(good), "--baseline", str(good)], capsys)
    assert status == 0 and "No significant regression" in printed
    status, as_json, _ = run(
        ["eval", "compare", str(bad), "--baseline", str(good), "--json"], capsys
    )
    assert status == 1 and json.loads(as_json)["changes"][0]["direction"] == "worse"


def test_compare_shows_the_p_its_verdict_used_and_max_drop_fails_a_small_dataset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    small = sums(10).to_file(tmp_path / "small.jsonl")
    good, bad = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    for agent, out in (("half_right", good), ("worse", bad)):
        run(["eval", "run", str(small), "--agent", f"evals_models:{agent}", "--out", str(out)],
            capsys)  # fmt: skip
    status, as_json, _ = run(
        ["eval", "compare", str(bad), "--baseline", str(good), "--json"], capsys
    )
    success = json.loads(as_json)["changes"][0]
    assert success["metric"] == "success" and success["baseline"] - success["current"] > 0.3
    # ten cases: the drop is not significant once adjusted, and the verdict says so by the
    # adjusted p it was decided on (the raw p beside it, labelled)
    assert status == 0 and not success["significant"] and success["p_adjusted"] > 0.05
    assert success["p_adjusted"] >= success["p_value"]
    status, printed, _ = run(["eval", "compare", str(bad), "--baseline", str(good)], capsys)
    assert "| p (Holm) | p (raw) |" in printed
    assert (
        f"| {success['p_adjusted']:.3g} | {success['p_value']:.3g} | no significant change |"
        in (printed)
    )
    status, printed, _ = run(
        ["eval", "compare", str(bad), "--baseline", str(good), "--max-drop", "20"], capsys
    )
    assert status == 1 and "**worse** (over the maximum drop)" in printed
    assert "Regression (alpha 0.05, Holm; or success down more than 20%): default success" in (
        printed
    )
    status, _, err = run(["eval", "compare", str(bad), "--baseline", str(good),
                          "--max-drop", "150"], capsys)  # fmt: skip
    assert status == 2 and "--max-drop" in err


def test_a_grid_in_yaml_a_judge_in_code_and_prices_reach_the_evaluation(
    dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    grid = tmp_path / "variants.yaml"
    grid.write_text("grid:\n  return_retries: [0, 1, 2]\n")
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"coin": {"input_per_million": 1, "output_per_million": 2}}))
    out = tmp_path / "records.jsonl"
    status, printed, err = run(
        [
            "eval",
            "run",
            str(dataset),
            "--agent",
            "evals_models:half_right",
            "--variants",
            str(grid),
            "--judge",
            "evals_models:positive",
            "--prices",
            str(prices),
            "--out",
            str(out),
        ],
        capsys,
    )
    assert status == 0, err
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["variant"] for r in records} == {f"return_retries={n}" for n in range(3)}
    assert [v["judge"] for v in records[0]["verdicts"] if records[0]["correct"]] in (
        [],
        ["equals_expected", "positive"],
    )
    assert all(r["cost"] > 0 for r in records)
    assert "cost/case" in printed and "cost/case;" in printed  # priced: the measure is cost


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"dataset": "missing.jsonl"}, "cannot read"),
        ({"agent": "evals_models:sums"}, "--agent: 'evals_models:sums' is a function"),
        ({"agent": "no_such_module:x"}, "--agent: cannot import 'no_such_module'"),
        ({"variants": '{"r": {"retries": 1}}'}, "'retries' is not a run option"),
        ({"variants": "[1, 2]"}, "--variants: expected"),
        ({"extra": ["--max-cost", "1"]}, "--max-cost: needs --prices"),
        ({"extra": ["--concurrency", "0"]}, "--concurrency: must be at least 1"),
    ],
)
def test_bad_usage_exits_2_naming_the_argument(
    dataset: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    change: dict[str, object],
    message: str,
) -> None:
    variants = tmp_path / "variants.json"
    variants.write_text(str(change.get("variants", '{"r0": {}}')))
    source = tmp_path / str(change["dataset"]) if "dataset" in change else dataset
    argv = [
        "eval",
        "run",
        str(source),
        "--agent",
        str(change.get("agent", "evals_models:half_right")),
        "--variants",
        str(variants),
        "--out",
        str(tmp_path / "out.jsonl"),
        *change.get("extra", []),
    ]  # type: ignore[misc]
    status, _, err = run(argv, capsys)
    assert status == 2
    assert message in err


def test_report_and_compare_of_a_file_with_no_records_are_bad_usage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    status, _, err = run(["eval", "report", str(empty)], capsys)
    assert status == 2 and "holds no evaluation records" in err
    status, _, err = run(["eval", "compare", str(empty), "--baseline", str(tmp_path / "x")], capsys)
    assert status == 2


def test_agents_and_judges_load_as_subagent_run_loads_them(
    dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One loader (subagent._loading): the same messages, and a module that raises is a bug."""
    buggy = tmp_path / "buggy_agents.py"
    buggy.write_text("raise ZeroDivisionError('a bug at import')\n")
    base = ["eval", "run", str(dataset), "--out", str(tmp_path / "out.jsonl")]
    status, _, err = run([*base, "--agent", f"{buggy}:agent"], capsys)
    assert status == 3  # as `subagent run` says it: the agent's code raised
    assert err.splitlines() == [
        f"subagent eval run: error in the agent or code it runs: importing '{buggy}' raised "
        "ZeroDivisionError: a bug at import"
    ]
    cases = [
        (["--agent", "nowhere/agents.py:agent"], "--agent: no file 'nowhere/agents.py'"),
        (["--agent", "evals_models"], "--agent: expected 'module:name' or 'file.py:name'"),
        (["--agent", "evals_models:half_right", "--judge", "evals_models:nothing"],
         "--judge: 'evals_models' has no attribute 'nothing'"),
    ]  # fmt: skip
    for argv, message in cases:
        status, _, err = run([*base, *argv], capsys)
        assert status == 2
        assert f"subagent eval run: error: {message}" in err


def test_compare_with_no_case_paired_says_so_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before, after = tmp_path / "before.jsonl", tmp_path / "after.jsonl"
    for start, out in ((0, before), (10, after)):  # cases renamed since the baseline
        path = sums(3, start=start).to_file(tmp_path / f"sums{start}.jsonl")
        run(["eval", "run", str(path), "--agent", "evals_models:half_right", "--out", str(out)],
            capsys)  # fmt: skip
    status, printed, err = run(["eval", "compare", str(after), "--baseline", str(before)],
                               capsys)  # fmt: skip
    assert status == 2
    assert "Nothing compared" in printed and "No significant regression" not in printed
    assert "nothing compared: no case of --baseline" in err
