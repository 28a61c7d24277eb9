"""The evaluation (eval/): its tasks and judges, the resumable runner, the report.

No model runs here: the runner is driven by scripted models, and the report's check reads
the records committed in ``eval/results/``.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from pathlib import Path

import pytest
from configs import CONFIGS, config_named
from eval_report import PAGE, render_section, render_table, rows_of, update_page
from results_file import Record, append_record, read_records
from run_eval import pending_runs, run_pending
from tasks import CATEGORIES, Task, judge, load_tasks

from subagent import LLMRequest, LLMResponse, ScriptedLLM, SubAgent

pytestmark = pytest.mark.anyio

TASKS = load_tasks()


def tasks_of(category: str) -> list[Task]:
    return [task for task in TASKS if task.category == category]


def test_the_task_file_holds_at_least_forty_tasks_covering_every_category() -> None:
    assert len(TASKS) >= 40
    counts = Counter(task.category for task in TASKS)
    assert set(counts) == set(CATEGORIES)
    assert all(count >= 5 for count in counts.values()), counts
    assert any(task.length for task in TASKS)
    assert all(any(config.selects(task) for config in CONFIGS) for task in TASKS)


@pytest.mark.parametrize("task", TASKS, ids=[task.id for task in TASKS])
def test_each_judge_accepts_its_reference_answer_and_rejects_a_wrong_one(task: Task) -> None:
    assert judge(task, task.answer)
    assert not judge(task, None)
    wrong = copy.deepcopy(task.answer)
    if task.judge["kind"] == "list":
        wrong = wrong[:-1]
    elif task.judge["kind"] == "plan":
        wrong["[Steps]"] = wrong["[Steps]"].split("\n", 1)[1]  # one step fewer
    else:
        key = next(iter(wrong))
        value = wrong[key]
        wrong[key] = value + 1 if isinstance(value, int | float) else f"{value} Jr"
    assert not judge(task, wrong)


def test_a_task_line_that_is_not_a_task_is_named(tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"id": "x"}\n')
    with pytest.raises(ValueError, match=r"tasks.jsonl:1: not a task"):
        load_tasks(path)


class CountingModel:
    """Answers every call with text that is not JSON, and counts the calls."""

    model_name = "counting"

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, request: LLMRequest) -> LLMResponse:
        self.calls += 1
        return LLMResponse(text="no idea")


async def test_the_runner_records_every_run_and_skips_finished_ones_when_resumed(
    tmp_path: Path,
) -> None:
    path = tmp_path / "model.jsonl"
    tasks = tasks_of("arithmetic")[:3] + tasks_of("extract")[:2]
    first, second = config_named("retries-0"), config_named("retries-1")

    runs = pending_runs(tasks, [first], path)
    assert [(config.name, task.id) for config, task in runs] == [
        ("retries-0", task.id) for task in tasks
    ]
    model = CountingModel()
    assert await run_pending("m", model, runs, path, progress=False) == 5
    assert model.calls == 5
    records = list(read_records(path))
    assert sorted(record.task for record in records) == sorted(task.id for task in tasks)
    assert all(record.step.failure is not None for record in records)

    # Resumed with one more configuration: only its runs are left, two calls each.
    runs = pending_runs(tasks, [first, second], path)
    assert {config.name for config, _ in runs} == {"retries-1"}
    await run_pending("m", model, runs, path, progress=False)
    assert model.calls == 5 + 5 * 2
    assert pending_runs(tasks, [first, second], path) == []


async def test_a_record_cut_short_by_a_kill_runs_again(tmp_path: Path) -> None:
    path = tmp_path / "model.jsonl"
    tasks = tasks_of("arithmetic")[:2]
    config = config_named("retries-0")
    await run_pending("m", CountingModel(), pending_runs(tasks, [config], path), path,
                      progress=False)  # fmt: skip
    whole = path.read_text()
    path.write_text(whole[: len(whole) - 40])  # the last record lost its end, and its newline
    runs = pending_runs(tasks, [config], path)
    assert [task.id for _, task in runs] == [tasks[1].id]
    await run_pending("m", CountingModel(), runs, path, progress=False)
    assert [record.task for record in read_records(path)] == [task.id for task in tasks]


def test_a_complete_line_that_is_not_a_record_is_named(tmp_path: Path) -> None:
    path = tmp_path / "model.jsonl"
    path.write_text('{"model": "m"}\n')
    with pytest.raises(ValueError, match=r"model.jsonl:1: not a record"):
        list(read_records(path))


async def hand_built_records(tmp_path: Path) -> list[Record]:
    """Three arithmetic runs: right at once, right after a correction, valid but wrong."""
    agent = SubAgent(name="arithmetic", prompt="{{question}}", output=dict[str, int])
    task = tasks_of("arithmetic")[0]
    right = json.dumps(task.answer)
    wrong = json.dumps({"value": task.answer["value"] + 1})
    scripts = [[right], ["not json", right], [wrong]]
    path = tmp_path / "fixture.jsonl"
    for script in scripts:
        step = await agent.run(task.context, llm=ScriptedLLM(script), max_turns=1,
                               return_retries=1)  # fmt: skip
        append_record(path, Record("qwen", "retries-1", task.id, task.digest, step))
    return list(read_records(path))


async def test_the_report_counts_what_the_records_hold(tmp_path: Path) -> None:
    (row,) = rows_of(await hand_built_records(tmp_path), TASKS)
    assert (row.model, row.config, row.runs, row.valid, row.correct) == ("qwen", "retries-1",
                                                                         3, 3, 2)  # fmt: skip
    assert row.success_rate == pytest.approx(2 / 3)
    assert row.calls == [1, 2, 1]
    assert row.stop_reasons == {"stop": 4}  # one per reply
    table = render_table([row])
    assert "| Qwen2.5-Coder 0.5B | `retries-1` | 3 | 3 | 2 | 67% | 1.33 |" in table


async def test_records_of_a_task_changed_since_they_ran_are_left_out(tmp_path: Path) -> None:
    records = await hand_built_records(tmp_path)
    changed = [Task(**{**task.__dict__, "digest": "another"}) for task in TASKS]
    assert rows_of(records, changed) == []


def test_the_page_shows_what_the_committed_records_give() -> None:
    page = PAGE.read_text(encoding="utf-8")
    assert update_page(page, render_section()) == page, "run: make eval-report"


def test_the_page_lacking_its_markers_is_an_error() -> None:
    with pytest.raises(ValueError, match="lacks the markers"):
        update_page("# a page\n", "table")
