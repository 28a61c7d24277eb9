"""subagent.evals._html: the report as one self-contained HTML page, every text escaped,
its size bounded."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from evals_models import CoinModel, adder, sums

from subagent import ScriptedLLM
from subagent.evals import Case, Dataset, JudgeContext, Report, System, SystemRun, judge
from subagent.evals._html import HTML_CASES, OUTPUT_CHARS

pytestmark = pytest.mark.anyio

BUDGETS = {"r0": {"return_retries": 0}, "r1": {"return_retries": 1}}


class Page(HTMLParser):
    """What a browser would make of the page: its tags, its texts, what it would load."""

    def __init__(self, text: str):
        super().__init__()
        self.tags: list[str] = []
        self.texts: list[str] = []
        self.loads: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.loads += [value or "" for name, value in attrs if name in ("src", "href")]

    def handle_data(self, data: str) -> None:
        self.texts.append(data)


async def test_the_page_has_the_reports_tables_and_loads_nothing(tmp_path: Path) -> None:
    out = tmp_path / "runs.jsonl"
    report = await sums(4).evaluate(adder, BUDGETS, out=out, llm=CoinModel(first=0.5, fix=1.0))
    page = Page(report.to_html(records=out))
    assert "script" not in page.tags and page.loads == [] and "link" not in page.tags
    text = " ".join(page.texts)
    for cells in (report.variant("r0").cells(), report.variant("r1").cells()):
        assert all(cell in text for cell in cells)
    recommendation = report.recommendation
    assert recommendation is not None and recommendation.reason in text
    assert "equals_expected" in text and "judged (valid runs)" in text
    assert page.tags.count("table") == 3  # variants, judges, cases
    assert all(f"sum-{n}" in text for n in range(4))
    assert 'output: {"value": 3}' in text  # the run of sum-1 that got it right
    assert Report.read(out).to_html(records=out) == report.to_html(records=out)  # records alone


async def test_a_script_in_a_case_name_or_an_output_is_escaped(tmp_path: Path) -> None:
    evil = "<script>alert(1)</script>"

    async def echo(case: Case[object]) -> SystemRun:
        return SystemRun(output=f"{evil} & more")

    @judge
    def never(ctx: JudgeContext[object]) -> tuple[bool, str]:
        return False, f"saw {evil}"

    out = tmp_path / "runs.jsonl"
    dataset = Dataset([Case(name=f"case {evil}")], [never], name=f"set {evil}")
    report = await dataset.evaluate(System(echo), {f"v {evil}": {}}, out=out)
    text = report.to_html(records=out)
    assert "<script>" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    page = Page(text)
    assert "script" not in page.tags
    joined = "".join(page.texts)
    assert f"case {evil}" in joined and f"v {evil}" in joined and f"never: saw {evil}" in joined


async def test_long_outputs_are_cut_and_many_cases_are_listed_up_to_the_limit(
    tmp_path: Path,
) -> None:
    async def long(case: Case[object]) -> SystemRun:
        return SystemRun(output="x" * (OUTPUT_CHARS * 4))

    cases = [Case(name=f"c{n}") for n in range(HTML_CASES + 7)]
    out = tmp_path / "runs.jsonl"
    report = await Dataset(cases).evaluate(System(long), out=out, concurrency=16)
    text = report.to_html(records=out)
    assert max(len(run) for run in re.findall("x+", text)) <= OUTPUT_CHARS
    assert text.count("<summary>run</summary>") == HTML_CASES
    assert "7 more cases are in the JSON report" in text
    assert len(text.encode()) < 1_000 * HTML_CASES  # bounded, whatever the outputs


async def test_without_records_the_cases_show_their_marks_only() -> None:
    report = await sums(2).evaluate(adder, llm=ScriptedLLM(['{"value": 0}', '{"value": 5}']),
                                    concurrency=1)  # fmt: skip
    text = report.to_html()
    assert "<details>" not in text
    assert '<td class="right">right</td>' in text and '<td class="wrong">wrong</td>' in text


async def test_a_failed_run_shows_its_failure_and_why(tmp_path: Path) -> None:
    out = tmp_path / "runs.jsonl"
    report = await sums(1).evaluate(adder, out=out, llm=ScriptedLLM(["no answer here"]))
    (outcome,) = report.outcomes
    text = Page(report.to_html(records=out)).texts
    assert f"failed: {outcome.failure}" in text
    assert any(t.startswith(f"failed ({outcome.failure}): ") for t in text)
