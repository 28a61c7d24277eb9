"""The evaluation's tasks: their agents, their data (``eval/tasks.jsonl``) and their judge.

``eval/tasks.jsonl`` is a ``subagent.evals`` dataset file: one case per line, each naming
its agent (one of :data:`AGENTS`), its prompt context, its expected output (what is
judged), its category as its first tag (``length`` as another marks the cut-reply
comparison's tasks) and how it is judged (``metadata.judge``). :func:`load_tasks` reads it
as a :class:`~subagent.evals.Dataset` judged by :class:`TaskJudge`.

*Valid* means the run ended ``done`` (the output contract and validators accepted it);
*correct* means the judge accepts the output against the known answer. A case's
``expected`` holds only what is judged: for ``fields`` tasks the expected value of each
judged field (free-text fields are left out), for ``plan`` tasks a reference plan that
passes the judge.

Categories:

- ``extract``: fields from a short text into a pydantic model.
- ``arithmetic``: a computation, answered as ``{"value": <int>}``.
- ``plan``: a three-section plan (``sections_parser``) checked by a validator; the judge
  also wants the requested number of steps and the goal's keywords.
- ``trap``: extraction whose first reply is predictably malformed for a small model: a
  dollar amount asked in integer cents, a spelled-out date asked as an ISO date, a
  percentage asked as a fraction, a list asked as a bare JSON array.
- ``lookup``: the answer is only in a tool's result (made-up stock levels).
"""

from __future__ import annotations

import datetime
import math
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import to_jsonable_python

from subagent import SubAgent, Validation, sections_parser, tool
from subagent.evals import Case, Dataset, Judge, JudgeContext, Verdict

__all__ = [
    "AGENTS",
    "CATEGORIES",
    "TASKS_FILE",
    "TaskJudge",
    "category",
    "is_correct",
    "load_tasks",
]

TASKS_FILE = Path(__file__).resolve().parent / "tasks.jsonl"
CATEGORIES = ("extract", "arithmetic", "plan", "trap", "lookup")


# --- output models ------------------------------------------------------------------------


def _no_description(schema: dict[str, Any]) -> None:
    schema.pop("description", None)


class Answer(BaseModel):
    """The base of the answers: their docstrings stay out of the JSON schema the model sees.

    Pydantic puts a model's docstring in its schema as ``description``; the 0.5B model then
    writes the schema back instead of an answer (the ``trap-docstring`` tasks keep one, to
    measure that).
    """

    model_config = ConfigDict(json_schema_extra=_no_description)


class Person(Answer):
    """A person mentioned in a text."""

    name: str
    age: int
    city: str


class Order(Answer):
    """An order: what, how many, at what price each."""

    item: str
    quantity: int
    unit_price: float


class Event(Answer):
    """An event in a calendar."""

    title: str
    weekday: str
    hour: int


class Value(Answer):
    """The result of a computation."""

    value: int


class Payment(Answer):
    """A payment, its amount in integer cents."""

    payer: str
    amount_cents: int


class Meeting(Answer):
    """A meeting on a calendar date."""

    topic: str
    date: datetime.date


class Share(Answer):
    """A share of a whole, as a fraction between 0 and 1."""

    group: str
    fraction: Annotated[float, Field(ge=0, le=1)]


class Contact(BaseModel):
    """A person mentioned in a text (this docstring reaches the model: a trap)."""

    name: str
    age: int
    city: str


class Stock(Answer):
    """The stock level of one product."""

    sku: str
    units: int


# --- the plan validator -------------------------------------------------------------------

PLAN_HEADERS = ("[Goal]", "[Steps]", "[Risks]")
_NUMBERED = re.compile(r"^\s*\d+[.)]\s+\S")


def numbered_steps(text: str) -> list[str]:
    """The numbered lines (``1. ...``, ``2) ...``) of a plan's steps section."""
    return [line.strip() for line in text.splitlines() if _NUMBERED.match(line)]


def plan_is_complete(sections: Mapping[str, str]) -> Validation:
    """A plan needs a goal, at least two numbered steps and at least one risk."""
    errors = [f"{header} is empty: write its content under the header"
              for header in PLAN_HEADERS if not sections.get(header, "").strip()]  # fmt: skip
    if len(numbered_steps(sections.get("[Steps]", ""))) < 2:
        errors.append("[Steps] must be a numbered list, one step per line: '1. ...', '2. ...'")
    return Validation.fail(*errors) if errors else Validation.ok()


# --- the lookup tool ----------------------------------------------------------------------

STOCK = {
    "SKU-1042": 37, "SKU-2210": 5, "SKU-3307": 118, "SKU-4475": 0,
    "SKU-5126": 64, "SKU-6093": 12, "SKU-7781": 250, "SKU-8834": 9,
}  # fmt: skip


@tool(run_in_thread=False)
def stock_level(sku: str) -> str:
    """Look up how many units of a product are in stock.

    Args:
        sku: The product's SKU, e.g. SKU-1042.
    """
    key = sku.strip().upper()
    if key not in STOCK:
        return f"unknown SKU {sku!r}"
    return f"{key}: {STOCK[key]} units in stock"


# --- the agents ---------------------------------------------------------------------------

_EXTRACT = "Extract {{what}} from this text:\n{{text}}"

AGENTS: dict[str, SubAgent[Any]] = {
    agent.name: agent
    for agent in (
        SubAgent(name="person", prompt=_EXTRACT, output=Person),
        SubAgent(name="order", prompt=_EXTRACT, output=Order),
        SubAgent(name="event", prompt=_EXTRACT, output=Event),
        SubAgent(
            name="arithmetic", prompt="{{question}}\nAnswer with the integer result.", output=Value
        ),
        SubAgent(
            name="plan",
            prompt=(
                "Write a short plan to {{goal}}, with exactly {{steps}} numbered steps of one "
                "short line each, in this layout:\n[Goal]\n<the goal in one line>\n[Steps]\n"
                "1. <step>\n2. <step>\n...\n[Risks]\n- <one risk>"
            ),
            output=sections_parser(list(PLAN_HEADERS)),
            validators=[plan_is_complete],
        ),
        SubAgent(name="contact", prompt=_EXTRACT, output=Contact),
        SubAgent(name="payment", prompt=_EXTRACT, output=Payment),
        SubAgent(name="meeting", prompt=_EXTRACT, output=Meeting),
        SubAgent(name="share", prompt=_EXTRACT, output=Share),
        SubAgent(
            name="colours",
            prompt="List {{what}} in this text, in order:\n{{text}}",
            output=list[str],
        ),
        SubAgent(
            name="lookup",
            prompt=(
                "How many units of {{sku}} are in stock? Look it up with the stock_level "
                "tool, then answer."
            ),
            output=Stock,
            tools=[stock_level],
        ),
    )
}


# --- the dataset and its judge ------------------------------------------------------------


def category(case: Case[Any]) -> str:
    """A task's category: its first tag."""
    return case.tags[0] if case.tags else ""


def load_tasks(path: Path = TASKS_FILE) -> Dataset[Any]:
    """The tasks as a dataset judged by :class:`TaskJudge`.

    Raises:
        ConfigurationError: A line is not a case (naming the file, line and field).
        ValueError: A case's category, agent or judge is unknown (naming the case).
    """
    dataset = Dataset.from_file(path, judges=[TaskJudge()], name="tasks")
    for case in dataset:
        kind = case.metadata.get("judge", {}).get("kind")
        if category(case) not in CATEGORIES or case.agent not in AGENTS or kind not in _JUDGES:
            raise ValueError(
                f"{path.name}: case {case.name!r}: unknown category {category(case)!r}, agent "
                f"{case.agent!r} or judge {kind!r}"
            )
    return dataset


def _same(expected: Any, got: Any) -> bool:
    """Equal after normalising: strings by case and spacing, numbers within 1e-6."""
    if isinstance(expected, str):
        return isinstance(got, str) and _norm(expected) == _norm(got)
    if isinstance(expected, bool) or isinstance(got, bool):
        return expected is got
    if isinstance(expected, int | float):
        return isinstance(got, int | float) and math.isclose(expected, got, abs_tol=1e-6)
    return bool(expected == got)


def _norm(text: str) -> str:
    return " ".join(text.casefold().split()).strip(" .")


def _judge_fields(case: Case[Any], output: Any) -> str | None:
    if not isinstance(output, Mapping):
        return f"not an object: {output!r:.80}"
    wrong = [key for key, value in case.expected.items()
             if key not in output or not _same(value, output[key])]  # fmt: skip
    return f"wrong: {', '.join(wrong)}" if wrong else None


def _judge_list(case: Case[Any], output: Any) -> str | None:
    expected = case.expected
    if not isinstance(output, list) or len(output) != len(expected):
        return f"not a list of {len(expected)}: {output!r:.80}"
    wrong = [str(n) for n, (want, got) in enumerate(zip(expected, output, strict=True))
             if not _same(want, got)]  # fmt: skip
    return f"wrong items: {', '.join(wrong)}" if wrong else None


def _judge_plan(case: Case[Any], output: Any) -> str | None:
    if not isinstance(output, Mapping) or any(
        not isinstance(output.get(header), str) or not output[header].strip()
        for header in PLAN_HEADERS
    ):
        return "a section is missing or empty"
    rule = case.metadata["judge"]
    steps = numbered_steps(output["[Steps]"])
    if len(steps) != rule["steps"]:
        return f"{len(steps)} steps, not {rule['steps']}"
    goal = _norm(output["[Goal]"])
    missing = [keyword for keyword in rule["keywords"] if _norm(keyword) not in goal]
    return f"the goal lacks: {', '.join(missing)}" if missing else None


_JUDGES: dict[str, Callable[[Case[Any], Any], str | None]] = {
    "fields": _judge_fields,
    "list": _judge_list,
    "plan": _judge_plan,
}


def is_correct(case: Case[Any], output: Any) -> bool:
    """Whether ``output`` (a valid output, or its JSON data) is the task's correct answer."""
    return _JUDGES[case.metadata["judge"]["kind"]](case, to_jsonable_python(output)) is None


class TaskJudge(Judge):
    """Judges a run's output against its task's known answer, as its ``metadata.judge`` says.

    ``fields``: every expected field has the expected value (strings compared by case and
    spacing, numbers within 1e-6); ``list``: the same items in the same order; ``plan``:
    every section filled, the number of steps asked for, the goal's keywords in the goal.
    """

    name = "task"

    async def judge(self, ctx: JudgeContext[Any]) -> Verdict:
        """Judge the output's JSON form by the task's rule; the reason says what differs."""
        rule = _JUDGES[ctx.case.metadata["judge"]["kind"]]
        wrong = rule(ctx.case, to_jsonable_python(ctx.output))
        return Verdict(wrong is None, wrong)
