"""A case: one input of an evaluation (a prompt context and/or messages), what it expects.

A case is identified by its name (unique in its dataset) and, for resuming, by a digest of
what it gives the agent and what it expects: an edited case has a new digest and runs again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import to_jsonable_python
from typing_extensions import TypeVar

from subagent._errors import ConfigurationError
from subagent.llm import Message

__all__ = ["Case", "case_from_data", "case_to_data", "check_cases"]

OutputT = TypeVar("OutputT", default=Any)


@dataclass(frozen=True, slots=True)
class Case(Generic[OutputT]):
    """One input of an evaluation, and what its run should produce.

    Args:
        name: Unique in its dataset: what the report and the records call the case, and
            what pairs it with the same case in another evaluation.
        context: The prompt's variables (``agent.run(context)``).
        messages: The conversation to start from (``agent.run(messages=...)``), instead of
            or besides the prompt.
        expected: The output a correct run produces, for the judges that compare with it
            (``EqualsExpected``, ``FieldsMatch``); ``None``: no expected output.
        tags: Labels to group or filter cases by (``Dataset.tagged``, ``Report.tagged``).
        metadata: Anything else a judge may want (``ctx.case.metadata``).
        agent: The name of the agent that runs the case, when an evaluation is given
            several (``Dataset.evaluate({"name": agent, ...})``); ``None``: the one agent.

    Raises:
        ConfigurationError: The name is empty or a field has the wrong type.
    """

    name: str
    context: Mapping[str, Any] | BaseModel | None = None
    messages: Sequence[Message | Mapping[str, Any]] | str | None = None
    expected: OutputT | None = None
    tags: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)
    agent: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ConfigurationError("name", f"a case needs a non-empty name, got {self.name!r}")
        where = f"case {self.name!r}"
        if self.context is not None and not isinstance(self.context, Mapping | BaseModel):
            raise ConfigurationError(
                "context", f"{where}: must be a mapping or a pydantic model, got {self.context!r}"
            )
        if isinstance(self.tags, str) or not all(isinstance(tag, str) for tag in self.tags):
            raise ConfigurationError("tags", f"{where}: must be a sequence of strings")
        object.__setattr__(self, "tags", tuple(self.tags))
        if not isinstance(self.metadata, Mapping):
            raise ConfigurationError("metadata", f"{where}: must be a mapping")
        if self.agent is not None and (not isinstance(self.agent, str) or not self.agent.strip()):
            raise ConfigurationError(
                "agent", f"{where}: must be the name of an agent, got {self.agent!r}"
            )

    @property
    def digest(self) -> str:
        """A digest of what the case gives the agent and expects, and what its judges read.

        Its context, messages, expected output and metadata (judges read it); not its
        name, tags or agent (the agent is part of the variant's own digest).
        """
        given: dict[str, Any] = {
            "context": self.context,
            "messages": self.messages,
            "expected": self.expected,
        }
        if self.metadata:  # left out when empty: the digests of cases without any stay
            given["metadata"] = self.metadata
        # Plain data straight to JSON; models and other objects by their JSON form.
        text = json.dumps(given, sort_keys=True, ensure_ascii=False, default=_json_form)
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _json_form(value: object) -> Any:
    return to_jsonable_python(value, fallback=repr)


def check_cases(cases: Sequence[Case[Any]]) -> None:
    """Refuse a set of cases two of which share a name.

    Raises:
        ConfigurationError: Naming the repeated name.
    """
    seen: set[str] = set()
    for case in cases:
        if not isinstance(case, Case):
            raise ConfigurationError("cases", f"must be Case objects, got {case!r:.80}")
        if case.name in seen:
            raise ConfigurationError(
                "cases", f"two cases are named {case.name!r}: a case's name must be unique"
            )
        seen.add(case.name)


class _CaseData(BaseModel):
    """A case as stored in a dataset file."""

    model_config = ConfigDict(extra="forbid")

    name: str
    context: dict[str, Any] | None = None
    messages: list[dict[str, Any]] | str | None = None
    expected: Any = None
    tags: list[str] = []
    metadata: dict[str, Any] = {}
    agent: str | None = None


def case_from_data(data: object, where: str) -> Case[Any]:
    """A case from its stored form (a JSON object).

    Raises:
        ConfigurationError: The data is not a case; the message names ``where`` and the
            field.
    """
    try:
        stored = _CaseData.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or 'case'}: {error['msg']}"
            for error in exc.errors(include_url=False)
        )
        raise ConfigurationError("cases", f"{where}: not a case: {problems}") from None
    try:
        return Case(name=stored.name, context=stored.context, messages=stored.messages,
                    expected=stored.expected, tags=tuple(stored.tags),
                    metadata=stored.metadata, agent=stored.agent)  # fmt: skip
    except ConfigurationError as exc:
        raise ConfigurationError(exc.field, f"{where}: {exc.message}") from None


def case_to_data(case: Case[Any]) -> dict[str, Any]:
    """The stored form of ``case``: a JSON object (fields left at their default omitted)."""
    data: dict[str, Any] = {"name": case.name}
    values = {"context": case.context, "messages": case.messages, "expected": case.expected,
              "tags": list(case.tags), "metadata": dict(case.metadata),
              "agent": case.agent}  # fmt: skip
    for key, value in values.items():
        if value is not None and value != [] and value != {}:
            data[key] = to_jsonable_python(value)
    json.dumps(data)  # a value with no JSON form fails here, not half-way through a file
    return data
