"""Correction turns that differ from the failed attempt: a grammar, then a stronger model.

Run it with `python examples/corrections.py`. Two scripted models stand for a small one
that repeats itself and a stronger one:

1. ``Correction(output="json_schema")``: the correction turns ask for the output's schema
   as the provider's structured output (the work turn does not).
2. ``Correction(llm=stronger, when="repeat")``: the small model corrects first; once a
   correction repeats the failed reply word for word, the next one goes to the stronger
   model. The Step splits usage by model; ``summarize`` counts the repeat and the salvage.
"""

from __future__ import annotations

from pydantic import BaseModel

from subagent import Correction, LLMResponse, ScriptedLLM, SubAgent, Usage, summarize


class Total(BaseModel):
    cents: int


WRONG = '{"cents": "two fifty"}'
RIGHT = '{"cents": 250}'


def reply(text: str, tokens: int) -> LLMResponse:
    return LLMResponse(text=text, usage=Usage(input_tokens=tokens, output_tokens=8))


agent = SubAgent(
    name="till",
    prompt="How many cents are 2.50 dollars?",
    output=Total,
    max_turns=1,
    return_retries=2,
)


def grammar() -> None:
    small = ScriptedLLM([WRONG, RIGHT], model_name="small")
    step = agent.run_sync(llm=small, correction=Correction(output="json_schema"))
    modes = [request.output.mode if request.output else "prompted" for request in small.requests]
    print(f"1. {step.summary()}; asked for: {', '.join(modes)}")


def escalation() -> None:
    small = ScriptedLLM([reply(WRONG, 40), reply(WRONG, 60)], model_name="small")
    stronger = ScriptedLLM([reply(RIGHT, 200)], model_name="stronger")
    correction = Correction(llm=stronger, when="repeat")
    step = agent.run_sync(llm=small, correction=correction)
    for turn in step.turns:
        marks = ", ".join(m for m, on in (("repeated", turn.repeated),
                                          ("corrected", turn.corrected)) if on)  # fmt: skip
        print(f"   turn {turn.index} {turn.type.value:<11} {turn.model:<8} {marks}")
    by_model = {name: usage.total_tokens for name, usage in step.usage.by_model.items()}
    print(f"2. {step.summary()}; tokens by model: {by_model}")
    summary = summarize([step])
    print(f"   salvaged {summary.salvaged} of {summary.corrected_runs} corrected run(s), "
          f"{summary.repeated_corrections} repeated correction(s)")  # fmt: skip


if __name__ == "__main__":
    grammar()
    escalation()
