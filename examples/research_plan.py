"""Research plan: a sections output, a validator, and feedback the model can act on.

Run it with `python examples/research_plan.py`. The model is scripted, so the run is the
same every time:

1. The planner answers with [Plan] and [Risks] (in Markdown dress, which is accepted) but
   forgets [Timeline]: the parser's feedback names the missing section.
2. It adds a timeline without durations: the validator names each entry to fix.
3. It answers correctly.

Then `think_with_retry` asks a one-off question whose answer goes between two `=====` lines
(multi_section_parser's single-section mode); the model forgets the dividers once.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import anyio

from subagent import (
    ScriptedLLM,
    Step,
    SubAgent,
    Validation,
    multi_section_parser,
    sections_parser,
    think_with_retry,
)

HEADERS = ["[Plan]", "[Timeline]", "[Risks]"]
DURATION = re.compile(r"\b\d+\s*(?:day|week|month)s?\b")


def timeline_has_durations(sections: Mapping[str, str]) -> Validation:
    """Every timeline entry must say how long it takes."""
    entries = [line.strip() for line in sections["[Timeline]"].splitlines() if line.strip()]
    if not entries:
        return Validation.fail("[Timeline] is empty: list the phases with their durations")
    vague = [entry for entry in entries if not DURATION.search(entry)]
    if vague:
        return Validation.fail(
            *(f"timeline entry {entry!r} has no duration (e.g. '3 weeks')" for entry in vague)
        )
    return Validation.ok()


planner = SubAgent(
    name="research_planner",
    prompt="Write a research plan for this topic: {{topic}}",
    output=sections_parser(HEADERS),
    validators=[timeline_has_durations],
    max_turns=1,
    return_retries=2,
)

PLAN = "1. Survey prior work on tea-leaf reading.\n2. Run a blind trial with 40 readers."
RISKS = "- Too few volunteers.\n- Readers guess the brand by smell."
REPLIES = [
    f"Happy to help!\n\n**[Plan]**\n{PLAN}\n\n## Risks\n{RISKS}",
    f"[Plan]\n{PLAN}\n[Timeline]\n- Literature survey\n- Blind trial: 2 months\n[Risks]\n{RISKS}",
    f"[Plan]\n{PLAN}\n[Timeline]\n- Literature survey: 3 weeks\n- Blind trial: 2 months\n"
    f"[Risks]\n{RISKS}",
]


def print_turns(step: Step[dict[str, str]]) -> None:
    print(f"{'turn':>4}  {'type':<11} {'outcome':<8} feedback")
    for turn in step.turns:
        lines = (turn.error or "").splitlines()[:2]  # the headline and the first item
        head = f"{turn.index:>4}  {turn.type.value:<11} {turn.outcome.value:<8}"
        print(f"{head} {lines[0] if lines else ''}".rstrip())
        for line in lines[1:]:
            print(f"{'':>25} {line}")
    print(step.summary())


async def main() -> None:
    llm = ScriptedLLM(REPLIES)
    step = await planner.run({"topic": "Can tea-leaf readers tell brands apart?"}, llm=llm)
    print_turns(step)
    sections = step.raise_for_failure().output or {}
    for header, content in sections.items():
        print(f"\n{header}\n{content}")

    print("\n--- think_with_retry ---")
    oneoff = ScriptedLLM([
        "The single biggest risk is recruiting enough readers.",
        "Thinking it over...\n=====\nRecruiting enough readers.\n=====",
    ])  # fmt: skip
    answer = await think_with_retry(
        oneoff,
        "Name the biggest risk. Put the answer between two lines of =====.",
        multi_section_parser,
        max_corrections=1,
    )
    print(f"attempts: {len(oneoff.requests)}")
    print(f"answer: {answer}")


if __name__ == "__main__":
    anyio.run(main)
