"""The evaluation (eval/) on subagent.evals: its tasks and judge, the runner, the report, the
conversion of the old records.

No model runs here: the runner is driven by scripted models, and the report's check reads
the records committed in ``eval/results/``.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from configs import CONFIGS, GROUPS, config_named
from convert_records import convert_folder, old_task_digest
from eval_report import PAGE, render_section, render_table, reports, rows_of, update_page
from run_eval import local_chat, pending, plan, records_path, run_model
from tasks import AGENTS, CATEGORIES, TaskJudge, category, is_correct, load_tasks

from subagent import ConfigurationError, LLMRequest, LLMResponse, ScriptedLLM, Step
from subagent.evals import Case, Dataset, JudgeContext, Report

pytestmark = pytest.mark.anyio

TASKS = load_tasks()


def tasks_of(name: str) -> list[Case[Any]]:
    return [case for case in TASKS if category(case) == name]


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_task_file_holds_at_least_forty_tasks_covering_every_category() -> None:
    assert len(TASKS) >= 40
    counts = Counter(category(case) for case in TASKS)
    assert set(counts) == set(CATEGORIES)
    assert all(count >= 5 for count in counts.values()), counts
    assert all(case.agent in AGENTS for case in TASKS)
    assert all(any(group.selects(case) for group in GROUPS) for case in TASKS)
    length = [case for case in TASKS if "length" in case.tags]
    # the cut-reply group runs the length tasks, none of which needs a tool
    assert length and all(category(case) != "lookup" for case in length)
    assert len(CONFIGS) == len({config.name for config in CONFIGS}) == 11


@pytest.mark.parametrize("case", TASKS.cases, ids=[case.name for case in TASKS])
async def test_each_judge_accepts_its_reference_answer_and_rejects_a_wrong_one(
    case: Case[Any],
) -> None:
    assert is_correct(case, case.expected)
    wrong = copy.deepcopy(case.expected)
    kind = case.metadata["judge"]["kind"]
    if kind == "list":
        wrong = wrong[:-1]
    elif kind == "plan":
        wrong["[Steps]"] = wrong["[Steps]"].split("\n", 1)[1]  # one step fewer
    else:
        key = next(iter(wrong))
        value = wrong[key]
        wrong[key] = value + 1 if isinstance(value, int | float) else f"{value} Jr"
    assert not is_correct(case, wrong)
    verdict = await TaskJudge().judge(JudgeContext(case, wrong, None, "v"))
    assert not verdict.passed and verdict.reason


def test_a_task_line_that_is_not_a_task_is_named(tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"name": "x", "answer": 1}\n')
    with pytest.raises(ConfigurationError, match=r"tasks.jsonl:1: not a case: answer"):
        load_tasks(path)
    path.write_text('{"name": "x", "agent": "nobody", "tags": ["extract"], '
                    '"metadata": {"judge": {"kind": "fields"}}}\n')  # fmt: skip
    with pytest.raises(ValueError, match=r"case 'x': unknown category 'extract', agent 'nobody'"):
        load_tasks(path)


class CountingModel:
    """Answers every call with text that is not JSON, and counts the calls."""

    model_name = "local"

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, request: LLMRequest) -> LLMResponse:
        self.calls += 1
        return LLMResponse(text="no idea")


def small(*names: str) -> Dataset[Any]:
    """The first tasks of some categories, as the runner's dataset."""
    cases = [case for name in names for case in tasks_of(name)[:3]]
    return Dataset(cases, TASKS.judges, name="tasks")


async def test_the_runner_records_every_run_and_skips_finished_ones_when_resumed(
    tmp_path: Path,
) -> None:
    tasks = small("arithmetic", "extract")
    first = plan(tasks, [config_named("retries-0")])
    assert [(p.group.name, len(p.dataset), [v.name for v in p.variants]) for p in first] == [
        ("budgets", 6, ["retries-0"])
    ]
    model = CountingModel()
    assert pending("m", first, tmp_path, model) == 6
    await run_model("m", model, first, tmp_path, progress=False)
    assert model.calls == 6
    records = lines(records_path(tmp_path, "m", "budgets"))
    assert sorted(r["case"] for r in records) == sorted(case.name for case in tasks)
    assert all(r["step"]["failure"] is not None and r["agent"] for r in records)

    # Resumed with one more configuration: only its runs are left, two calls each.
    both = plan(tasks, [config_named("retries-0"), config_named("retries-1")])
    assert pending("m", both, tmp_path, model) == 6
    await run_model("m", model, both, tmp_path, progress=False)
    assert model.calls == 6 + 6 * 2
    assert pending("m", both, tmp_path, model) == 0


def test_the_committed_lookups_of_the_1_5b_stay_its_records_after_fields_were_added() -> None:
    # allow_fail came after these records; at its default it changes nothing for a typed
    # agent, so the records keep their digests and a resumed `make eval` does not redo them.
    from run_eval import RESULTS_DIR

    lookups = [config_named(name) for name in
               ("tools-native", "tools-react", "tools-native-3", "tools-react-3")]  # fmt: skip
    assert pending("qwen1.5b", plan(TASKS, lookups), RESULTS_DIR, local_chat()) == 0


async def test_each_group_has_its_records_file_and_a_record_cut_short_runs_again(
    tmp_path: Path,
) -> None:
    tasks = small("arithmetic", "lookup")
    planned = plan(tasks, [config_named("retries-0"), config_named("tools-native")])
    assert [p.group.name for p in planned] == ["budgets", "tools"]
    model = CountingModel()
    await run_model("m", model, planned, tmp_path, progress=False)
    path = records_path(tmp_path, "m", "tools")
    assert [r["variant"] for r in lines(path)] == ["tools-native"] * 3
    whole = path.read_text()
    path.write_text(whole[: len(whole) - 40])  # the last record lost its end, and its newline
    assert pending("m", planned, tmp_path, model) == 1
    await run_model("m", model, planned, tmp_path, progress=False)
    assert [r["case"] for r in lines(path)] == [case.name for case in tasks_of("lookup")[:3]]


async def hand_built() -> list[tuple[Case[Any], Step[Any]]]:
    """Three arithmetic runs: right at once, right after a correction, valid but wrong."""
    runs = []
    for case, kind in zip(tasks_of("arithmetic"), ("right", "corrected", "wrong"), strict=False):
        right = json.dumps(case.expected)
        script = {"right": [right], "corrected": ["not json", right],
                  "wrong": [json.dumps({"value": case.expected["value"] + 1})]}[kind]  # fmt: skip
        step = await AGENTS[case.agent].run(case.context, llm=ScriptedLLM(script), max_turns=1,
                                            return_retries=1)  # fmt: skip
        runs.append((case, step))
    return runs


def write_old_records(folder: Path, runs: list[tuple[Case[Any], Step[Any]]]) -> Path:
    """The runs as the harness before subagent.evals recorded them: ``<model>.jsonl``."""
    path = folder / "qwen.jsonl"
    old = [{"model": "qwen", "config": "retries-1", "task": case.name,
            "digest": old_task_digest(case), "step": step.model_dump(mode="json")}
           for case, step in runs]  # fmt: skip
    path.write_text("".join(json.dumps(line) + "\n" for line in old))
    meta = {"file": "q.gguf", "sha256": "ab", "llama_cpp_python": "0.3.36", "subagent": "0.1.0",
            "date": "2026-11-22", "runs": 3, "seconds": 90.0}  # fmt: skip
    (folder / "qwen.meta.json").write_text(json.dumps(meta))
    return path


async def test_old_records_convert_once_into_records_the_runner_resumes_from(
    tmp_path: Path,
) -> None:
    runs = await hand_built()
    write_old_records(tmp_path, runs)
    assert await convert_folder(tmp_path) == {"qwen/budgets": 3}
    assert not (tmp_path / "qwen.jsonl").exists()
    assert json.loads((tmp_path / "qwen" / "meta.json").read_text())["runs"] == 3
    records = lines(records_path(tmp_path, "qwen", "budgets"))
    assert [r["correct"] for r in records] == [True, True, False]
    assert [Step[Any].model_validate(r["step"]) for r in records] == [step for _, step in runs]
    cases = Dataset([case for case, _ in runs], TASKS.judges, name="budgets")
    planned = plan(cases, [config_named("retries-1")])
    assert pending("qwen", planned, tmp_path, local_chat()) == 0  # the runner's own digests
    assert pending("qwen", plan(cases, [config_named("retries-2")]), tmp_path, local_chat()) == 3
    assert await convert_folder(tmp_path) == {}  # nothing left to convert


async def test_a_record_of_a_task_changed_since_it_ran_is_refused(tmp_path: Path) -> None:
    runs = await hand_built()
    path = write_old_records(tmp_path, runs)
    path.write_text(path.read_text().replace(old_task_digest(runs[1][0]), "0" * 16))
    with pytest.raises(ValueError, match=rf"qwen.jsonl:2: task '{runs[1][0].name}' changed"):
        await convert_folder(tmp_path)
    assert path.exists()  # nothing lost


async def test_the_report_counts_what_the_records_hold(tmp_path: Path) -> None:
    write_old_records(tmp_path, await hand_built())
    await convert_folder(tmp_path)
    path = records_path(tmp_path, "qwen", "budgets")
    with path.open("a") as file:  # a record of a task that is gone
        file.write(json.dumps({**lines(path)[0], "case": "arithmetic-gone"}) + "\n")
    (row,) = rows_of(reports(tmp_path, TASKS.cases))  # the gone task's record left out
    assert (row.model, row.config) == ("qwen", "retries-1")
    result = row.result
    assert (result.runs, result.valid, result.correct) == (3, 3, 2)
    assert (result.corrected, result.salvaged) == (1, 1)
    assert result.stop_reasons == {"stop": 4}  # one per reply
    table = render_table([row])
    assert (
        "| Qwen2.5-Coder 0.5B | `retries-1` | 3 | 3 | 2 | 67% (21%-94%) | 1/1 | 0/1 | 1.33 |"
        in (table)
    )


async def test_records_of_a_task_changed_since_they_ran_are_left_out(tmp_path: Path) -> None:
    runs = await hand_built()
    write_old_records(tmp_path, runs)
    await convert_folder(tmp_path)
    names = {case.name for case, _ in runs}
    changed = [dataclasses.replace(case, context={"question": "?"}) if case.name in names
               else case for case in TASKS.cases]  # fmt: skip
    assert rows_of(reports(tmp_path, changed)) == []


def test_the_page_shows_what_the_committed_records_give() -> None:
    page = PAGE.read_text(encoding="utf-8")
    assert update_page(page, render_section()) == page, "run: make eval-report"


def test_the_committed_records_read_as_evals_reports_with_the_old_counts() -> None:
    # What the page showed before the harness moved onto subagent.evals (2026-11-22).
    budgets = reports()["qwen"]["budgets"]
    assert [(v.variant, v.runs, v.valid, v.correct) for v in budgets.variants] == [
        ("retries-0", 38, 27, 22),
        ("retries-1", 38, 29, 24),
        ("retries-2", 38, 29, 24),
        ("retries-3", 38, 29, 23),
        ("accumulate-3", 38, 29, 23),
    ]
    assert Report.read(records_path(Path(PAGE).parents[1] / "eval" / "results", "qwen",
                                    "budgets")).to_data() == budgets.to_data()  # fmt: skip


def test_the_page_lacking_its_markers_is_an_error() -> None:
    with pytest.raises(ValueError, match="lacks the markers"):
        update_page("# a page\n", "table")


async def test_a_report_of_old_records_says_how_to_convert_them(tmp_path: Path) -> None:
    write_old_records(tmp_path, await hand_built())
    with pytest.raises(SystemExit, match=r"qwen.jsonl\): convert them once with"):
        reports(tmp_path, TASKS.cases)
