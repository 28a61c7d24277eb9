"""The output-contract examples run as scripts and print what their docstrings promise."""

from __future__ import annotations

from support import run_example


def _run(name: str) -> list[str]:
    return run_example(name).splitlines()


def test_research_plan_example_corrects_a_missing_section_then_a_failed_check() -> None:
    lines = _run("research_plan.py")
    assert lines[1].split() == ["1", "must_return", "error", "Your", "answer", "is", "missing",
                                "1", "required", "section(s):"]  # fmt: skip
    assert lines[2].strip() == "- [Timeline]"
    assert lines[3].split()[:3] == ["2", "retry", "error"]
    assert "failed these checks" in lines[3]
    assert lines[4].strip() == (
        "- timeline entry '- Literature survey' has no duration (e.g. '3 weeks')"
    )
    assert lines[5].split() == ["3", "retry", "success"]
    assert lines[6] == "done in 3 turns (must_return, retry, retry)"
    text = "\n".join(lines)
    assert "[Timeline]\n- Literature survey: 3 weeks\n- Blind trial: 2 months" in text
    assert "[Risks]\n- Too few volunteers." in text
    assert lines[-2:] == ["attempts: 2", "answer: Recruiting enough readers."]


def test_retry_loop_pipeline_example_makes_one_correction() -> None:
    lines = _run("retry_loop_pipeline.py")
    assert lines[0] == "extracted: 2 entities, 2 relations"
    assert lines[1] == "correcting:"
    assert lines[2] == (
        "  - relation 'Marie Curie' worked with 'Pierre Curie' uses 'Pierre Curie', which is "
        "not listed in entities"
    )
    assert lines[3] == "valid=True corrections=1 exhausted=False"
    assert lines[4] == "entities: Marie Curie, Paris, Pierre Curie"
    assert lines[5:] == [
        "  Marie Curie --worked in--> Paris",
        "  Marie Curie --worked with--> Pierre Curie",
    ]
