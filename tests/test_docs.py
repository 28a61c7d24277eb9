"""The documentation harness: which pages and blocks it runs, and how it judges a block.

The pages' blocks themselves are collected from README.md and docs/*.md by the root
conftest.py (see tests/docs_harness.py); this module checks that nothing slips past it.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from docs_harness import NOT_RUN, SYBIL, PythonBlock, fences

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])

#: The languages a fenced block may name. Python is `python`, and every such block runs
#: (or is marked not runnable); the others are never run, so a Python snippet must not hide
#: behind one of them. Add a language here only if it is not Python.
OTHER_LANGUAGES = {"bash", "console", "json", "mermaid", "text"}


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def test_every_page_is_collected() -> None:
    testpaths = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"][
        "ini_options"
    ]["testpaths"]
    assert {"README.md", "docs"} <= set(testpaths)
    assert [_name(page) for page in PAGES if not SYBIL.should_parse(page)] == []
    assert "docs/tracing.md" in map(_name, PAGES)


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_fenced_block_names_a_known_language(page: Path) -> None:
    document = SYBIL.parse(page)
    wrong = [
        f"{document.line_column(fence.start)}: {fence.info or 'no language'!r}"
        for fence in fences(document)
        if fence.info != "python" and fence.info not in OTHER_LANGUAGES
    ]
    assert wrong == [], "Python blocks are tagged `python`; other languages: OTHER_LANGUAGES"


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_python_block_is_an_example(page: Path) -> None:
    document = SYBIL.parse(page)
    python = [fence for fence in fences(document) if fence.info == "python"]
    examples = list(document.examples())
    assert [example.region.start for example in examples] == [f.start for f in python]


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_not_run_note_marks_the_python_block_below_it(page: Path) -> None:
    document = SYBIL.parse(page)
    notes = [line for line in document.text.splitlines() if NOT_RUN.match(line)]
    marked = [
        example.parsed
        for example in document.examples()
        if isinstance(example.parsed, PythonBlock) and example.parsed.not_run
    ]
    assert len(notes) == len(marked), "a not-run note must sit just above a ```python fence"


_LINK = re.compile(r"\]\((?!https?://|mailto:)([^)\s]+)\)")


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors for the headings of ``page``."""
    anchors = set()
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return anchors


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_relative_links_point_at_files_and_headings_that_exist(page: Path) -> None:
    broken = []
    for target in _LINK.findall(page.read_text(encoding="utf-8")):
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists() or (
            anchor and linked.suffix == ".md" and anchor not in _anchors(linked)
        ):
            broken.append(target)
    assert broken == []


# --- how a block is judged, on pages written for the test ---------------------------------


def _run_page(tmp_path: Path, text: str) -> list[str]:
    """Run every block of a page as the suite does; what happened to each."""
    page = tmp_path / "page.md"
    page.write_text(text, encoding="utf-8")
    outcomes = []
    for example in SYBIL.parse(page).examples():
        try:
            example.evaluate()
        except pytest.skip.Exception as skipped:
            outcomes.append(f"skipped: {skipped.msg}")
        except Exception as error:
            outcomes.append(f"failed: {type(error).__name__}: {error}")
        else:
            outcomes.append("passed")
    return outcomes


def test_blocks_of_a_page_run_in_order_in_one_namespace(tmp_path: Path) -> None:
    page = "```python\nanswer = 41\n```\n\ntext\n\n```python\nassert answer + 1 == 42\n```\n"
    assert _run_page(tmp_path, page) == ["passed", "passed"]


def test_a_block_may_await_at_top_level(tmp_path: Path) -> None:
    page = (
        "```python\nimport anyio\n\nawait anyio.lowlevel.checkpoint()\n"
        "async with anyio.create_task_group():\n    done = True\n```\n"
        "```python\nassert done\n```\n"
    )
    assert _run_page(tmp_path, page) == ["passed", "passed"]


def test_a_block_prints_exactly_its_output_lines(tmp_path: Path) -> None:
    page = (
        '```python\nprint("done in 1 turn")\n#> done in 1 turn\nprint()\n#>\n```\n'
        '```python\nprint("done in 2 turns")\n#> done in 1 turn\n```\n'
        '```python\nprint("unannounced")\n```\n'
        "```python\n#> promised\n```\n"
    )
    outcomes = _run_page(tmp_path, page)
    assert outcomes[0] == "passed"
    assert "-done in 1 turn\n+done in 2 turns" in outcomes[1]
    assert "+unannounced" in outcomes[2]
    assert "-promised" in outcomes[3]


def test_a_block_that_raises_fails(tmp_path: Path) -> None:
    outcomes = _run_page(tmp_path, "```python\nundefined_agent.run()\n```\n")
    assert outcomes == ["failed: NameError: name 'undefined_agent' is not defined"]


def test_a_marked_block_is_compiled_but_not_run(tmp_path: Path) -> None:
    page = (
        "> **Not run in the test suite:** it needs a Jaeger container.\n\n"
        "```python\nraise SystemExit('never run')\n```\n\n"
        "> **Not run in the test suite:** it needs a real provider.\n"
        "```python\nawait agent.run(\n```\n"
    )
    outcomes = _run_page(tmp_path, page)
    assert outcomes[0] == "skipped: marked not runnable: it needs a Jaeger container."
    assert outcomes[1].startswith("failed: SyntaxError")


def test_a_note_marks_only_the_block_right_below_it(tmp_path: Path) -> None:
    page = (
        "> **Not run in the test suite:** it needs Docker.\n\nSome prose.\n\n"
        "```python\nran = True\n```\n"
    )
    assert _run_page(tmp_path, page) == ["passed"]
