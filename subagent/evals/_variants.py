"""Variants: the settings an evaluation compares, each a named mapping of run options.

A variant's options are the keyword arguments of ``SubAgent.run`` (``max_turns``,
``return_retries``, ``llm``, ``settings``, ``context_policy``...) or fields of the agent's
definition (``prompt``, ``prompts``, ``instructions``, ``protocol``...), which a variant
applies to a copy of the agent. Any run option the library gains later is a variant's
option too, unchanged. :func:`grid` spans every combination of a few axes.

An evaluation runs one agent, agents by name (each case names its own), a function making
each case's agent, or a :class:`~subagent.evals.System`: :class:`Planner` makes each
variant's :class:`Plan` for each of them, checked before any run.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeAlias, cast

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from subagent._agent import SubAgent
from subagent._errors import ConfigurationError
from subagent._options import RUN_OPTION_RULES, RUN_OPTIONS, taken_by
from subagent._policies import MOVED_KEYWORDS, flat_fields, with_fields
from subagent.evals._cases import Case
from subagent.evals._systems import System
from subagent.llm import LLMSpec
from subagent.records import digest

__all__ = [
    "RUN_ONLY_OPTIONS",
    "AgentFactory",
    "Plan",
    "Planner",
    "Target",
    "Variant",
    "Variants",
    "describe",
    "grid",
    "plan_variants",
]

# From the one table of run options (RUN_OPTION_RULES): what a variant may set, and what
# stays out of its digest.
_RUN_OPTIONS: Final = tuple(name for name in RUN_OPTIONS if name in taken_by("evals"))
_AGENT_FIELDS: Final = (
    *(field.name for field in dataclasses.fields(SubAgent) if field.init and field.name != "name"),
    # the records' fields by the agent keywords they were (protocol=...); the run options
    # among them (timeout=...) are run options here
    *(name for name in (*MOVED_KEYWORDS, "parser_kwargs") if name not in RUN_OPTIONS),
)
RUN_ONLY_OPTIONS: Final = frozenset(
    name for name, rule in RUN_OPTION_RULES.items() if not rule.shapes_runs
)
"""Run options that say where a run reports or what it is handed, not what it does: they
stay out of a variant's digest (changing them does not run the variant again)."""


@dataclass(frozen=True, slots=True)
class Variant:
    """One setting of an evaluation: a name and the options it runs with.

    Args:
        name: What the report calls it (unique in the evaluation).
        options: Run options (``max_turns=2``, ``llm=...``) and agent fields
            (``prompt=...``) over the agent's own; for a :class:`System`, its function's
            keyword arguments. Checked when the evaluation plans its runs, before any
            runs: an option that is neither a run option nor a field of the agent is
            refused, the message suggesting the nearest.

    Raises:
        ConfigurationError: The name is empty or the options are not a mapping.
    """

    name: str
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ConfigurationError("variants", f"a variant needs a name, got {self.name!r}")
        if not isinstance(self.options, Mapping):
            raise ConfigurationError(
                "variants", f"variant {self.name!r}: options must be a mapping"
            )


def _check_agent_options(variant: Variant) -> None:
    """Refuse an option that is neither a run option nor a field of the agent."""
    known = (*_RUN_OPTIONS, *_AGENT_FIELDS)
    for key in variant.options:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            rule = RUN_OPTION_RULES.get(str(key))
            refused = None if rule is None else rule.evals
            where = "not a run option" if refused is None else f"not a variant's: {refused},"
            raise ConfigurationError(
                "variants",
                f"variant {variant.name!r}: {key!r} is {where} nor a field of the agent{hint}",
            )


Variants: TypeAlias = "Mapping[str, Mapping[str, Any]] | Iterable[Variant] | None"
"""What ``Dataset.evaluate(variants=...)`` takes: ``{"name": {options}}``, a list of
:class:`Variant` (:func:`grid` makes one), or ``None`` for the agent as it is."""


def _label(value: object) -> str:
    if isinstance(value, str | int | float | bool) or value is None:
        return str(value)
    name = getattr(value, "model_name", None)
    if isinstance(name, str):
        return name
    return type(value).__name__


def grid(**axes: Sequence[Any]) -> list[Variant]:
    """Every combination of the values of each option, as variants named after them.

    ``grid(return_retries=[0, 1, 2], llm=[small, large])`` makes six variants, named
    ``return_retries=0, llm=gpt-4o-mini`` and so on (a model by its name).

    Raises:
        ConfigurationError: An axis is not a sequence of values, or is empty.
    """
    for key, values in axes.items():
        if isinstance(values, str | bytes) or not isinstance(values, Sequence) or not values:
            raise ConfigurationError("grid", f"{key}: must be a non-empty list of values")
    names = list(axes)
    variants = []
    for combination in itertools.product(*(axes[name] for name in names)):
        options = dict(zip(names, combination, strict=True))
        label = ", ".join(f"{key}={_label(value)}" for key, value in options.items())
        variants.append(Variant(label, options))
    return variants


_DEPTH = 8  # how deep describe() looks into nested data and dataclasses


def describe(value: object, depth: int = 0) -> Any:
    """A JSON form of an option's value that is stable from one process to the next.

    Plain data as itself; a pydantic model as its JSON; a model adapter as its class and
    model name; a function or class by its qualified name; a dataclass by its fields; any
    other object (and anything nested deeper than 8 levels) by its type: its insides are not
    looked into (rename the variant to run it again).
    """
    if value is None or isinstance(value, str | int | float | bool):
        return value
    kind = f"{type(value).__module__}.{type(value).__qualname__}"
    if depth >= _DEPTH:
        return {"type": kind}
    if isinstance(value, Mapping):
        return {str(key): describe(item, depth + 1) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [describe(item, depth + 1) for item in value]
    if isinstance(value, BaseModel):
        return to_jsonable_python(value, fallback=repr)
    if inspect.isclass(value) or inspect.isroutine(value):
        return f"{value.__module__}.{value.__qualname__}"
    name = getattr(value, "model_name", None)
    if isinstance(name, str):
        return {"type": kind, "model": name}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.fields(value)
        return {"type": kind, **{f.name: describe(getattr(value, f.name), depth + 1)
                                 for f in fields if f.init}}  # fmt: skip
    return {"type": kind}


# Agent fields added after records were kept, each with when it leaves an agent's runs as
# they were before it: then it is left out of the digest, so those records stay the
# agent's (a resumed evaluation does not make them again). allow_fail: the fail offered,
# as every typed agent offered it before (today only allow_fail=True offers it).
_LATER_FIELDS: dict[str, Callable[[SubAgent[Any]], bool]] = {
    "allow_fail": lambda agent: agent._parts.allow_fail,
    "hooks": lambda agent: not agent.hooks,
}


def _agent_digest(agent: SubAgent[Any]) -> str:
    """A digest of what in the agent's definition shapes its runs' results."""
    output = agent.output
    if inspect.isclass(output) and issubclass(output, BaseModel):
        shape: Any = output.model_json_schema()
    else:
        shape = describe(output)
    fields = {
        name: describe(value)
        for name, value in flat_fields(agent).items()
        if name not in ("output", "llm") and not _as_before(agent, name)
    }
    return digest([fields, shape])


def _as_before(agent: SubAgent[Any], name: str) -> bool:
    """Whether field ``name`` is one added later, at a value that changes nothing."""
    unchanged = _LATER_FIELDS.get(name)
    return unchanged is not None and unchanged(agent)


@dataclass(frozen=True, slots=True)
class Plan:
    """A variant made ready to run: its agent (or system), its run options, its identity.

    Attributes:
        name: The variant's name.
        agent: The agent it runs (the evaluation's, with the variant's agent fields);
            ``None`` when an agent is made per case (``factory``) or a system runs.
        options: The run options of each run (the evaluation's, then the variant's); a
            system's keyword arguments.
        model: The model's name (``model_name``), if the model says it.
        described: The variant's options in a stable JSON form (stored in each record).
        digest: A digest of the agent (or factory, or system), the options and the model:
            a record made under another digest is not this variant's, and the run is made
            again.
        changes: The variant's agent fields, applied to each agent ``factory`` makes.
        factory: Makes the agent of each case (an evaluation given a function of a case).
        system: The system run instead of an agent.
        index: Where the variant stands in the evaluation.
    """

    name: str
    agent: SubAgent[Any] | None
    options: dict[str, Any]
    model: str | None
    described: dict[str, Any]
    digest: str
    changes: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    factory: AgentFactory | None = None
    system: System | None = None
    index: int = 0

    def agent_for(self, case: Case[Any]) -> SubAgent[Any]:
        """The agent that runs ``case`` under this variant.

        Raises:
            ConfigurationError: A factory returned something that is not a SubAgent.
        """
        if self.agent is not None:
            return self.agent
        assert self.factory is not None
        made = self.factory(case)
        if not isinstance(made, SubAgent):
            raise ConfigurationError(
                "agent", f"the agent made for case {case.name!r} is not a SubAgent: {made!r:.80}"
            )
        return with_fields(made, self.changes)


AgentFactory: TypeAlias = "Callable[[Case[Any]], SubAgent[Any]]"
"""A function of a case that makes the agent running it (tools or validators of its own)."""

Target: TypeAlias = (
    "SubAgent[Any] | Mapping[str, SubAgent[Any]] | Callable[[Case[Any]], SubAgent[Any]] | System"
)
"""What an evaluation runs: one agent; agents by name (each case names its own,
``Case.agent``); a function making each case's agent; or a :class:`System` that is not a
subagent agent."""


def _variants(variants: Variants) -> list[Variant]:
    if variants is None:
        return [Variant("default")]
    if isinstance(variants, Mapping):
        made = []
        for name, options in variants.items():
            if not isinstance(options, Mapping):
                raise ConfigurationError(
                    "variants", f"variant {name!r}: its options must be a mapping, got {options!r}"
                )
            made.append(Variant(name, options))
        return made
    if isinstance(variants, str | bytes) or not isinstance(variants, Iterable):
        raise ConfigurationError(
            "variants", f"must be a mapping of names to options or a list of Variant, "
            f"got {variants!r:.80}"
        )  # fmt: skip
    listed = list(variants)
    for item in listed:
        if not isinstance(item, Variant):
            raise ConfigurationError("variants", f"must be Variant objects, got {item!r:.80}")
    return listed


def _listed(variants: Variants) -> list[Variant]:
    """The variants, checked: at least one, names unique."""
    listed = _variants(variants)
    if not listed:
        raise ConfigurationError("variants", "no variant to run")
    seen: set[str] = set()
    for variant in listed:
        if variant.name in seen:
            raise ConfigurationError("variants", f"two variants are named {variant.name!r}")
        seen.add(variant.name)
    return listed


def _model_name(model: object) -> str | None:
    name = getattr(model, "model_name", None)
    return name if isinstance(name, str) else None


def _split(variant: Variant, common: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any],
                                                                  dict[str, Any]]:  # fmt: skip
    """A variant's run options, its agent fields, and its identity (what its digest covers)."""
    _check_agent_options(variant)
    merged = {**common, **variant.options}
    options = {key: value for key, value in merged.items() if key in _RUN_OPTIONS}
    changes = {key: value for key, value in merged.items() if key not in _RUN_OPTIONS}
    if isinstance(options.get("llm"), str):
        options["llm"] = LLMSpec(options["llm"], field=f"variant {variant.name!r}: llm")
    identity = {key: describe(value) for key, value in merged.items()
                if key not in RUN_ONLY_OPTIONS}  # fmt: skip
    return options, changes, identity


def _described(variant: Variant) -> dict[str, Any]:
    return {key: describe(value) for key, value in variant.options.items()
            if key not in RUN_ONLY_OPTIONS}  # fmt: skip


def _checked(agent: SubAgent[Any], variant: Variant, options: dict[str, Any],
             changes: dict[str, Any]) -> SubAgent[Any]:  # fmt: skip
    """``agent`` with the variant's fields, its options checked as ``run()`` would."""
    try:
        planned = with_fields(agent, changes)
        planned.check_options(**options)
    except ConfigurationError as exc:
        raise ConfigurationError(exc.field, f"variant {variant.name!r}: {exc.message}") from None
    return planned


def plan_variants(
    agent: SubAgent[Any], variants: Variants, common: Mapping[str, Any]
) -> list[Plan]:
    """The variants of an evaluation of ``agent``, checked and ready to run.

    ``common`` holds the run options of every run (the evaluation's ``llm=``...); a
    variant's own options win over them. A model named by a string becomes one
    :class:`~subagent.llm.LLMSpec` per variant (not one per run).

    Raises:
        ConfigurationError: Two variants share a name, an option is invalid for the agent
            (as ``run()`` would say), or no variant was given.
    """
    plans: list[Plan] = []
    base_digest = _agent_digest(agent)
    for index, variant in enumerate(_listed(variants)):
        options, changes, identity = _split(variant, common)
        planned = _checked(agent, variant, options, changes)
        model_name = _model_name(options.get("llm") or planned.llm)
        plans.append(
            Plan(
                name=variant.name,
                agent=planned,
                options=options,
                model=model_name,
                described=_described(variant),
                digest=digest(
                    [
                        base_digest,
                        identity,
                        _agent_digest(planned) if changes else None,
                        model_name,
                    ]
                ),
                index=index,
            )
        )
    return plans


def _factory_plans(
    factory: AgentFactory, variants: Variants, common: Mapping[str, Any], first: Case[Any] | None
) -> list[Plan]:
    """The variants of an evaluation whose agents are made per case, by ``factory``.

    The options are checked against the agent made for the first case. A plan's digest
    covers the factory (by its qualified name: what it makes follows from the case, whose
    own digest covers it), the options and the model.
    """
    sample = None if first is None else factory(first)
    if sample is not None and not isinstance(sample, SubAgent):
        raise ConfigurationError(
            "agent", f"the agent made for case {first.name!r} is not a SubAgent: "
            f"{sample!r:.80}"
        )  # fmt: skip
    made_by = describe(factory)
    plans = []
    for index, variant in enumerate(_listed(variants)):
        options, changes, identity = _split(variant, common)
        model: object = options.get("llm")
        if sample is not None:
            model = model or _checked(sample, variant, options, changes).llm
        model_name = _model_name(model)
        plans.append(Plan(
            name=variant.name, agent=None, options=options, model=model_name,
            described=_described(variant), digest=digest([made_by, identity, model_name]),
            changes=changes, factory=factory, index=index,
        ))  # fmt: skip
    return plans


def _system_plans(system: System, variants: Variants, common: Mapping[str, Any]) -> list[Plan]:
    """The variants of an evaluation of a system: its function's keyword arguments."""
    plans = []
    for index, variant in enumerate(_listed(variants)):
        options = {key: value for key, value in {**common, **variant.options}.items()
                   if key not in RUN_ONLY_OPTIONS}  # fmt: skip
        system.check_options(variant.name, options)
        model_name = _model_name(options.get("llm"))
        identity = {key: describe(value) for key, value in options.items()}
        plans.append(Plan(
            name=variant.name, agent=None, options=options, model=model_name,
            described=_described(variant),
            digest=digest(["system", system.name, identity, model_name]),
            system=system, index=index,
        ))  # fmt: skip
    return plans


class Planner:
    """The plans of every variant for each case of an evaluation, made before any run.

    One agent, agents by name, a factory or a system (see :data:`Target`); every
    variant's options are checked first (a factory's against the agent it makes for the
    first case), and every case's agent name against the agents given.

    Raises:
        ConfigurationError: As :func:`plan_variants`; a case names no agent, or one the
            evaluation was not given; the target is none of the above.
    """

    def __init__(self, target: object, variants: Variants, common: Mapping[str, Any],
                 cases: Sequence[Case[Any]]):  # fmt: skip
        self._by_agent: dict[str, list[Plan]] = {}
        self._plans: list[Plan] = []
        if isinstance(target, System):
            self._plans = _system_plans(target, variants, common)
        elif isinstance(target, SubAgent):
            self._plans = plan_variants(target, variants, common)
            for case in cases:
                if case.agent is not None and case.agent != target.name:
                    raise ConfigurationError(
                        "agent", f"case {case.name!r} names agent {case.agent!r}, but the "
                        f"evaluation runs agent {target.name!r} (give agents by name to run "
                        "several)"
                    )  # fmt: skip
        elif isinstance(target, Mapping):
            if not target:
                raise ConfigurationError("agent", "no agent given")
            for name, agent in target.items():
                if not isinstance(agent, SubAgent):
                    raise ConfigurationError(
                        "agent", f"agent {name!r}: must be a SubAgent, got {agent!r:.80}"
                    )
            used = {case.agent for case in cases}
            for name, agent in target.items():
                if name in used:  # an agent no case names does not run: not planned
                    self._by_agent[name] = plan_variants(agent, variants, common)
            if not self._by_agent:  # no case: the variants are still checked
                self._by_agent[""] = plan_variants(next(iter(target.values())), variants, common)
            for case in cases:
                if case.agent not in target:
                    named = "names no agent" if case.agent is None else (
                        f"names agent {case.agent!r}"
                    )  # fmt: skip
                    raise ConfigurationError(
                        "agent", f"case {case.name!r} {named}; the agents are: "
                        f"{', '.join(map(str, target))}"
                    )  # fmt: skip
        elif callable(target):
            self._plans = _factory_plans(
                cast(AgentFactory, target), variants, common, cases[0] if cases else None
            )
        else:
            raise ConfigurationError(
                "agent", "must be a SubAgent, a mapping of names to agents, a function of a "
                f"case making its agent, or a System; got {target!r:.80}"
            )  # fmt: skip

    @property
    def variants(self) -> list[Plan]:
        """One plan per variant, in order (for a mapping of agents: the first agent's)."""
        return self._plans or next(iter(self._by_agent.values()))

    def plans(self, case: Case[Any]) -> list[Plan]:
        """The plans of ``case``, one per variant, in order."""
        if self._by_agent:
            return self._by_agent[case.agent or ""]
        return self._plans
