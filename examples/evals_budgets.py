"""What does one more correction turn buy? An evaluation of three correction budgets.

Run it with `python examples/evals_budgets.py`. A stand-in model (scripted, seeded, no
server) extracts an order from a sentence: its first answer breaks the schema on about a
third of the cases (a price written as words), and a correction fixes most of those. The
evaluation:

1. runs 60 cases under ``return_retries`` 0, 1 and 2, records every run in a JSON Lines
   file (run it again: nothing is made twice), and prints the report: success with its 95%
   interval, correction salvage, repeated corrections, calls, tokens, cost per case;
2. recommends the cheapest budget whose success is within 5 points of the best;
3. reads the report back from the records alone, as ``subagent eval report`` does;
4. compares with a baseline made on a worse model: the drop in success is flagged.
"""

from __future__ import annotations

import hashlib
import re
import tempfile
from pathlib import Path

import anyio
from pydantic import BaseModel

from subagent import LLMRequest, LLMResponse, Price, SubAgent, Usage
from subagent.evals import Case, Dataset, FieldsMatch, Report, grid


class Order(BaseModel):
    item: str
    quantity: int
    unit_price: float


ITEMS = ("lamp", "chair", "kettle", "mug", "desk", "rug")

agent = SubAgent(
    name="orders",
    prompt="Extract the order from this sentence: {{sentence}}",
    output=Order,
    max_turns=1,
)


def chance(*parts: object) -> float:
    """A number in [0, 1) fixed by ``parts``: the stand-in model's dice."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class StandIn:
    """Answers like a small model: a broken first answer now and then, mostly fixed when
    corrected; now and then a right-looking wrong quantity."""

    def __init__(self, name: str, broken: float, fixed: float):
        self.model_name = name
        self.broken = broken
        self.fixed = fixed
        self.calls = 0

    async def complete(self, request: LLMRequest) -> LLMResponse:
        self.calls += 1
        sentence = str(request.messages[1].content).splitlines()[0]  # the task, as asked
        quantity, price = re.findall(r"\d+(?:\.\d+)?", sentence)[:2]
        item = next(name for name in ITEMS if name in sentence)
        correction = re.search(r"Correction attempt (\d+)", str(request.messages[-1].content))
        attempt = int(correction[1]) if correction else 0
        usage = Usage(input_tokens=180 + 60 * attempt, output_tokens=20)
        roll = chance(self.model_name, sentence, attempt)
        if (attempt == 0 and roll < self.broken) or (attempt > 0 and roll > self.fixed):
            text = f'{{"item": "{item}", "quantity": {quantity}, "unit_price": "{price} dollars"}}'
            return LLMResponse(text=text, usage=usage)
        off = chance(self.model_name, sentence, "off") < 0.05
        text = f'{{"item": "{item}", "quantity": {int(quantity) + off}, "unit_price": {price}}}'
        return LLMResponse(text=text, usage=usage)


def cases() -> Dataset[Order]:
    made = []
    for n in range(60):
        item, quantity, price = ITEMS[n % len(ITEMS)], 1 + n % 7, 5 + 2.5 * (n % 9)
        sentence = f"Please send {quantity} of the {item} at {price} each."
        expected = Order(item=item, quantity=quantity, unit_price=price)
        made.append(Case(name=f"order-{n}", context={"sentence": sentence}, expected=expected))
    return Dataset(made, [FieldsMatch()], name="orders")


async def main() -> None:
    dataset = cases()
    budgets = grid(return_retries=[0, 1, 2])
    prices = Price(input_per_million=0.15, output_per_million=0.6)
    with tempfile.TemporaryDirectory() as folder:
        records = Path(folder) / "orders.jsonl"
        model = StandIn("small", broken=0.35, fixed=0.92)
        report = await dataset.evaluate(agent, budgets, out=records, prices=prices, llm=model)
        print(report.to_markdown().split("\n\nCases:")[0])
        before = model.calls
        again = await dataset.evaluate(agent, budgets, out=records, prices=prices, llm=model)
        unchanged = again.to_data() == report.to_data()
        print(f"\nrun again: {model.calls - before} calls made, the same report: {unchanged}")

        alone = Report.read(records)
        same = "the same" if alone.to_data() == report.to_data() else "DIFFERENT"
        print(f"the report from the records alone: {same}")

        baseline = await dataset.evaluate(
            agent,
            {"return_retries=1": {"return_retries": 1}},
            prices=prices,
            llm=StandIn("older", 0.35, 0.92),
        )
        worse = await dataset.evaluate(
            agent,
            {"return_retries=1": {"return_retries": 1}},
            prices=prices,
            llm=StandIn("newer", 0.7, 0.3),
        )
        print()
        print(worse.compare(baseline).to_markdown())


if __name__ == "__main__":
    anyio.run(main)
