"""The scenarios every framework runs, and the checks that keep each run honest.

A scenario is a script of model replies (text, or one tool call) played by an instant fake
model at each framework's model boundary, plus what a correct run must show: how many model
calls, how many tool executions, a valid ``Answer(value=3)``, and requests that grow (each
request carries the previous reply and the feedback or tool result that followed it).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from pydantic import BaseModel

INVALID = '{"value": "three"}'
VALID = '{"value": 3}'
PROMPT = "Compute 1+2. Reply with JSON only."
INSTRUCTIONS = 'You compute sums. Answer with a JSON object {"value": <integer>}.'


class Answer(BaseModel):
    value: int


EXPECTED = Answer(value=3)


@dataclass(frozen=True)
class ToolCallSpec:
    """One tool call the fake model asks for."""

    name: str
    arguments: dict[str, int]
    call_id: str

    @property
    def arguments_json(self) -> str:
        return json.dumps(self.arguments)


Reply = str | ToolCallSpec


class Tally:
    """Tool executions since the last :meth:`reset` (the tool counts itself)."""

    tool_calls = 0

    @classmethod
    def reset(cls) -> None:
        cls.tool_calls = 0


async def add(a: int, b: int) -> int:
    """Add two integers."""
    Tally.tool_calls += 1
    return a + b


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    script: tuple[Reply, ...]
    work_turns: int
    corrections: int
    traced: bool = False

    @property
    def model_calls(self) -> int:
        return len(self.script)

    @property
    def tool_calls(self) -> int:
        return sum(isinstance(reply, ToolCallSpec) for reply in self.script)

    @property
    def uses_tools(self) -> bool:
        return self.tool_calls > 0


def _tool_call(index: int) -> ToolCallSpec:
    return ToolCallSpec("add", {"a": index, "b": 1}, f"call_{index}")


S1 = Scenario(
    "S1", "one invalid then one valid structured return, correction budget 2",
    (INVALID, VALID), work_turns=1, corrections=2,
)  # fmt: skip
S2 = Scenario(
    "S2", "one tool call then a valid return", (_tool_call(1), VALID), work_turns=2, corrections=2
)
S3 = Scenario(
    "S3", "S1 with OpenTelemetry on (SDK provider, in-memory exporter)",
    S1.script, work_turns=1, corrections=2, traced=True,
)  # fmt: skip
S4 = Scenario(
    "S4", "10 turns: 9 tool calls then a valid return (context growth)",
    (*(_tool_call(i) for i in range(9)), VALID), work_turns=10, corrections=2,
)  # fmt: skip
SCENARIOS = (S1, S2, S3, S4)
BY_NAME = {scenario.name: scenario for scenario in SCENARIOS}


@dataclass
class Outcome:
    """What one run produced, as seen from the model boundary and the framework's result."""

    output: object
    request_sizes: list[int] = field(default_factory=list)
    """One entry per model call: the size of the request (messages/items, or body bytes)."""


RunFn = Callable[[], Awaitable[Outcome]]


class Unsupported(Exception):
    """The framework has no equivalent of the scenario (the reason is the message)."""


class ScenarioError(AssertionError):
    """A run that did not do what its scenario says: its timing would mean nothing."""


def check(scenario: Scenario, outcome: Outcome, tool_calls: int) -> None:
    """Raise :class:`ScenarioError` unless the run did exactly what the scenario says."""
    problems = []
    output = outcome.output
    # instructor returns an instance of a subclass it derives from the model.
    if not isinstance(output, Answer) or output.model_dump() != EXPECTED.model_dump():
        problems.append(f"output {outcome.output!r}, expected {EXPECTED!r}")
    calls = len(outcome.request_sizes)
    if calls != scenario.model_calls:
        problems.append(f"{calls} model calls, expected {scenario.model_calls}")
    if tool_calls != scenario.tool_calls:
        problems.append(f"{tool_calls} tool executions, expected {scenario.tool_calls}")
    sizes = outcome.request_sizes
    if any(later <= earlier for earlier, later in itertools.pairwise(sizes)):
        problems.append(f"requests did not grow: sizes {sizes}")
    if problems:
        raise ScenarioError(f"{scenario.name}: " + "; ".join(problems))


class Script:
    """The replies of one run, in order; the fake models read from it."""

    __slots__ = ("position", "replies", "sizes")

    def __init__(self, replies: tuple[Reply, ...]):
        self.replies = replies
        self.position = 0
        self.sizes: list[int] = []

    def next(self, request_size: int) -> Reply:
        """Record one model call and return its reply."""
        self.sizes.append(request_size)
        if self.position >= len(self.replies):
            raise ScenarioError(f"model called {self.position + 1} times, script has no reply")
        reply = self.replies[self.position]
        self.position += 1
        return reply
