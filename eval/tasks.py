"""The evaluation's tasks: their agents, their data (``eval/tasks.jsonl``) and their judges.

A task is one prompt context for one of the agents below, with the answer known in advance
and a judge that decides whether a valid output is also *correct*. Valid means the run
ended ``done`` (the output contract and validators accepted it); correct means the judge
accepts the output against the known answer. A task's ``answer`` holds only what is judged:
for ``fields`` tasks the expected value of each judged field (free-text fields are left
out), for ``plan`` tasks a reference plan that passes the judge.

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

import dataclasses
import datetime
import hashlib
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from subagent import SubAgent, Validation, sections_parser, tool

__all__ = [
    "AGENTS",
    "CATEGORIES",
    "TASKS_FILE",
    "Task",
    "agent_for",
    "judge",
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


def agent_for(task: Task, **changes: Any) -> SubAgent[Any]:
    """The task's agent, with definition-level changes (``protocol``, ``correct_cut_replies``)."""
    agent = AGENTS[task.agent]
    return dataclasses.replace(agent, **changes) if changes else agent


# --- tasks and judges ---------------------------------------------------------------------


@dataclass(frozen=True)
class Task:
    """One task: an agent, its prompt context, the known answer and how to judge it.

    Attributes:
        id: A unique, stable name (``extract-person-01``).
        category: One of :data:`CATEGORIES`.
        agent: The name of its agent in :data:`AGENTS`.
        context: The prompt variables.
        answer: What is judged (see the module's docstring).
        judge: The judge and its parameters: ``{"kind": "fields"}``, ``{"kind": "list"}``
            or ``{"kind": "plan", "steps": 3, "keywords": [...]}``.
        length: Part of the tight ``max_tokens`` comparison (cut replies).
    """

    id: str
    category: str
    agent: str
    context: dict[str, Any]
    answer: Any
    judge: dict[str, Any]
    length: bool = False
    digest: str = field(default="", compare=False)


def load_tasks(path: Path = TASKS_FILE) -> list[Task]:
    """Read the task file: one JSON object per line.

    Raises:
        ValueError: A line is not a well-formed task (the message names the line).
    """
    tasks: list[Task] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            task = Task(**data)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{path.name}:{number}: not a task: {exc}") from exc
        if task.category not in CATEGORIES or task.agent not in AGENTS:
            raise ValueError(f"{path.name}:{number}: unknown category or agent in {task.id}")
        canonical = json.dumps(data, sort_keys=True, separators=(",", ":"))
        digest = hashlib.sha256(canonical.encode()).hexdigest()[:16]
        tasks.append(Task(**data, digest=digest))
    ids = [task.id for task in tasks]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{path.name}: duplicate task ids")
    return tasks


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


def _judge_fields(task: Task, output: Any) -> bool:
    if not isinstance(output, Mapping):
        return False
    return all(key in output and _same(value, output[key]) for key, value in task.answer.items())


def _judge_list(task: Task, output: Any) -> bool:
    return (
        isinstance(output, list)
        and len(output) == len(task.answer)
        and all(_same(want, got) for want, got in zip(task.answer, output, strict=True))
    )


def _judge_plan(task: Task, output: Any) -> bool:
    if not isinstance(output, Mapping) or any(
        not isinstance(output.get(header), str) or not output[header].strip()
        for header in PLAN_HEADERS
    ):
        return False
    goal = _norm(output["[Goal]"])
    steps = numbered_steps(output["[Steps]"])
    return len(steps) == task.judge["steps"] and all(
        _norm(keyword) in goal for keyword in task.judge["keywords"]
    )


_JUDGES: dict[str, Callable[[Task, Any], bool]] = {
    "fields": _judge_fields,
    "list": _judge_list,
    "plan": _judge_plan,
}


def judge(task: Task, output: Any) -> bool:
    """Whether ``output`` (a run's output as JSON data) is the task's correct answer.

    Args:
        task: The task.
        output: The validated output, as JSON data (``model_dump(mode="json")``); ``None``
            for a failed run, which is never correct.
    """
    if output is None:
        return False
    return _JUDGES[task.judge["kind"]](task, output)
