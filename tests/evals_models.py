"""Scripted models for the evaluation tests (``tests/test_evals*.py``): seeded, per case.

Each reply depends only on the seed, the case's numbers (in the first user message) and the
attempt (read from the failed reply before it), never on the order runs are scheduled in,
so an evaluation with any concurrency gets the same answers.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from pydantic import BaseModel

from subagent import LLMRequest, LLMResponse, SubAgent, Usage, Validation
from subagent.evals import Case, Dataset, EqualsExpected, Judge, JudgeContext, Verdict

__all__ = [
    "AGENTS",
    "BUG",
    "Answer",
    "CoinModel",
    "NotNegative",
    "adder",
    "buggy",
    "half_right",
    "positive",
    "sums",
    "uniform",
    "worse",
]


class Answer(BaseModel):
    value: int


adder = SubAgent(name="adder", prompt="What is {{a}} + {{b}}?", output=Answer, max_turns=1)
"""Adds two numbers: the cases give ``a`` and ``b``; the right answer is their sum."""


def sums(count: int, start: int = 0) -> Dataset[Answer]:
    """``count`` adder cases, ``sum-N`` asking N + 2N, judged against 3N."""
    cases = [
        Case(name=f"sum-{n}", context={"a": n, "b": 2 * n}, expected=Answer(value=3 * n))
        for n in range(start, start + count)
    ]
    return Dataset(cases, [EqualsExpected()], name="sums")


def uniform(*parts: object) -> float:
    """A number in [0, 1) fixed by ``parts``."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class CoinModel:
    """Answers the adder's task: right first with probability ``first``, else invalid.

    A correction (a request with an earlier attempt in it) answers right with probability
    ``fix``, else repeats the invalid reply, whitespace aside (more of it inside with
    ``respace``). A
    valid answer is wrong (off by one) with probability ``wrong``. Every reply reports
    ``tokens`` prompt tokens and 5 completion tokens.
    """

    def __init__(
        self,
        seed: object = 0,
        *,
        first: float = 0.8,
        fix: float = 0.5,
        wrong: float = 0.0,
        tokens: int = 100,
        respace: bool = False,
        model_name: str = "coin",
    ):
        self.seed = seed
        self.first = first
        self.fix = fix
        self.wrong = wrong
        self.tokens = tokens
        self.respace = respace
        self.model_name = model_name
        self.calls = 0

    async def complete(self, request: LLMRequest) -> LLMResponse:
        self.calls += 1
        task = next(m.content for m in request.messages if m.role == "user")
        a, b = (int(n) for n in re.findall(r"-?\d+", str(task))[:2])
        # Which attempt this is, read from the failed reply before it (whatever the context
        # policy kept): each invalid reply ends with as many spaces as attempts before it.
        replies = [str(m.content) for m in request.messages if m.role == "assistant"]
        attempt = 0 if not replies else len(replies[-1]) - len(replies[-1].rstrip(" ")) + 1
        chance = self.first if attempt == 0 else self.fix
        usage = Usage(input_tokens=self.tokens, output_tokens=5)
        if uniform(self.seed, a, b, attempt) < chance:
            off = uniform(self.seed, a, b, "wrong") < self.wrong
            return LLMResponse(text=f'{{"value": {a + b + off}}}', usage=usage)
        invalid = '{"value":  "many"}' if self.respace and attempt else '{"value": "many"}'
        return LLMResponse(text=invalid + " " * attempt, usage=usage)


half_right = SubAgent(
    name="adder",
    prompt="What is {{a}} + {{b}}?",
    output=Answer,
    max_turns=1,
    llm=CoinModel(first=0.5, fix=1.0),
)
"""The adder with a model of its own (for the command line): right first half the time, and
right after one correction."""

worse = SubAgent(
    name="adder",
    prompt="What is {{a}} + {{b}}?",
    output=Answer,
    max_turns=1,
    llm=CoinModel(first=0.2, fix=0.2),
)
"""The same agent on a worse model: a regression."""


BUG = {"in": True}
"""Whether :data:`buggy`'s validator has its bug (a test fixes it by setting False)."""


def _check_with_a_bug(answer: Answer) -> Validation:
    if BUG["in"]:
        raise RuntimeError("the validator has a bug")
    return Validation.ok()


buggy = SubAgent(
    name="adder",
    prompt="What is {{a}} + {{b}}?",
    output=Answer,
    max_turns=1,
    llm=CoinModel(first=1.0, fix=1.0),
    validators=[_check_with_a_bug],
)
"""An adder whose validator raises while ``BUG["in"]``: every run crashes."""


def positive(ctx: Any) -> bool:
    """A judge written in code: the answer is not negative."""
    return bool(ctx.output.value >= 0)


AGENTS = {"adder": half_right, "worse": worse}
"""Agents by name (for the command line): cases name the one that runs them."""


class NotNegative(Judge):
    """A judge class written in code: the answer is not negative."""

    name = "not_negative"

    async def judge(self, ctx: JudgeContext[Any]) -> Verdict:
        """Pass an answer of 0 or more."""
        return Verdict(ctx.output.value >= 0)
