"""Variants: the settings an evaluation compares, each a named mapping of run options.

A variant's options are the keyword arguments of ``SubAgent.run`` (``max_turns``,
``return_retries``, ``llm``, ``settings``, ``context_policy``...) or fields of the agent's
definition (``prompt``, ``prompts``, ``instructions``, ``protocol``...), which a variant
applies to a copy of the agent. Any run option the library gains later is a variant's
option too, unchanged. :func:`grid` spans every combination of a few axes.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from subagent._agent import RunArguments, SubAgent
from subagent._errors import ConfigurationError
from subagent.llm import LLMSpec
from subagent.records import digest

__all__ = ["RUN_ONLY_OPTIONS", "Plan", "Variant", "Variants", "describe", "grid", "plan_variants"]

_RUN_OPTIONS: Final = tuple(name for name in RunArguments.__annotations__ if name != "messages")
_AGENT_FIELDS: Final = tuple(
    field.name for field in dataclasses.fields(SubAgent) if field.init and field.name != "name"
)
RUN_ONLY_OPTIONS: Final = frozenset({"tracer_provider", "on_event", "on_text", "on_state", "deps"})
"""Run options that say where a run reports or what it is handed, not what it does: they
stay out of a variant's digest (changing them does not run the variant again)."""


@dataclass(frozen=True, slots=True)
class Variant:
    """One setting of an evaluation: a name and the options it runs with.

    Args:
        name: What the report calls it (unique in the evaluation).
        options: Run options (``max_turns=2``, ``llm=...``) and agent fields
            (``prompt=...``) over the agent's own.

    Raises:
        ConfigurationError: The name is empty, or an option is neither a run option nor a
            field of the agent (the message suggests the nearest).
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
        known = (*_RUN_OPTIONS, *_AGENT_FIELDS)
        for key in self.options:
            if key not in known:
                close = difflib.get_close_matches(str(key), known, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                where = "per case (Case.messages)" if key == "messages" else "not a run option"
                raise ConfigurationError(
                    "variants",
                    f"variant {self.name!r}: {key!r} is {where} nor a field of the agent{hint}",
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


def _agent_digest(agent: SubAgent[Any]) -> str:
    """A digest of what in the agent's definition shapes its runs' results."""
    output = agent.output
    if inspect.isclass(output) and issubclass(output, BaseModel):
        shape: Any = output.model_json_schema()
    else:
        shape = describe(output)
    fields = {f.name: describe(getattr(agent, f.name)) for f in dataclasses.fields(agent)
              if f.init and f.name not in ("output", "llm")}  # fmt: skip
    return digest([fields, shape])


@dataclass(frozen=True, slots=True)
class Plan:
    """A variant made ready to run: its agent, its run options, its identity.

    Attributes:
        name: The variant's name.
        agent: The agent it runs (the evaluation's, with the variant's agent fields).
        options: The run options of each run (the evaluation's, then the variant's).
        model: The model's name (``model_name``), if the model says it.
        described: The variant's options in a stable JSON form (stored in each record).
        digest: A digest of the agent, the options and the model: a record made under
            another digest is not this variant's, and the run is made again.
    """

    name: str
    agent: SubAgent[Any]
    options: dict[str, Any]
    model: str | None
    described: dict[str, Any]
    digest: str


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
    listed = _variants(variants)
    if not listed:
        raise ConfigurationError("variants", "no variant to run")
    plans: list[Plan] = []
    seen: set[str] = set()
    base_digest = _agent_digest(agent)
    for variant in listed:
        if variant.name in seen:
            raise ConfigurationError("variants", f"two variants are named {variant.name!r}")
        seen.add(variant.name)
        merged = {**common, **variant.options}
        options = {key: value for key, value in merged.items() if key in _RUN_OPTIONS}
        changes = {key: value for key, value in merged.items() if key not in _RUN_OPTIONS}
        if isinstance(options.get("llm"), str):
            options["llm"] = LLMSpec(options["llm"], field=f"variant {variant.name!r}: llm")
        try:
            planned = dataclasses.replace(agent, **changes) if changes else agent
            planned.check_options(**options)
        except ConfigurationError as exc:
            raise ConfigurationError(
                exc.field, f"variant {variant.name!r}: {exc.message}"
            ) from None
        model = options.get("llm") or planned.llm
        model_name = getattr(model, "model_name", None)
        described = {key: describe(value) for key, value in variant.options.items()
                     if key not in RUN_ONLY_OPTIONS}  # fmt: skip
        identity = {key: describe(value) for key, value in merged.items()
                    if key not in RUN_ONLY_OPTIONS}  # fmt: skip
        plans.append(
            Plan(
                name=variant.name,
                agent=planned,
                options=options,
                model=model_name if isinstance(model_name, str) else None,
                described=described,
                digest=digest(
                    [
                        base_digest,
                        identity,
                        _agent_digest(planned) if changes else None,
                        model_name if isinstance(model_name, str) else None,
                    ]
                ),
            )
        )
    return plans
