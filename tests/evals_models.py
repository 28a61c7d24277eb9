"""Scripted models for the evaluation tests (``tests/test_evals*.py``): seeded, per case.

Each reply depends only on the seed, the case's task (the first user message) and how many
attempts came before it in the request, never on the order runs are scheduled in, so an
evaluation with any concurrency gets the same answers.
"""

from __future__ import annotations

import hashlib
import re

from pydantic import BaseModel

from subagent import LLMRequest, LLMResponse, SubAgent, Usage

__all__ = ["Answer", "CoinModel", "adder", "uniform"]


class Answer(BaseModel):
    value: int


adder = SubAgent(name="adder", prompt="What is {{a}} + {{b}}?", output=Answer, max_turns=1)
"""Adds two numbers: the cases give ``a`` and ``b``; the right answer is their sum."""


def uniform(*parts: object) -> float:
    """A number in [0, 1) fixed by ``parts``."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class CoinModel:
    """Answers the adder's task: right first with probability ``first``, else invalid.

    A correction (a request with an earlier attempt in it) answers right with probability
    ``fix``, else repeats the invalid reply (with other whitespace when ``respace``). A
    valid answer is wrong (off by one) with probability ``wrong``. Every reply reports
    ``tokens`` prompt tokens and 5 completion tokens.
    """

    def __init__(self, seed: object = 0, *, first: float = 0.8, fix: float = 0.5,
                 wrong: float = 0.0, tokens: int = 100, respace: bool = False,
                 model_name: str = "coin"):  # fmt: skip
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
        attempt = sum(m.role == "assistant" for m in request.messages)
        chance = self.first if attempt == 0 else self.fix
        usage = Usage(input_tokens=self.tokens, output_tokens=5)
        if uniform(self.seed, a, b, attempt) < chance:
            off = uniform(self.seed, a, b, "wrong") < self.wrong
            return LLMResponse(text=f'{{"value": {a + b + off}}}', usage=usage)
        invalid = '{"value":  "many"}' if self.respace and attempt else '{"value": "many"}'
        return LLMResponse(text=invalid, usage=usage)
