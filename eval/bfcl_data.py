"""BFCL's questions, function docs and grading, from the ``bfcl-eval`` package as it ships.

The Berkeley Function Calling Leaderboard publishes its data and checker on the package
index as ``bfcl-eval`` (Apache-2.0). The eval environment installs it without its declared
dependencies (torch, vendor SDKs, ...): grading needs none of them. This module reads:

- ``bfcl_eval/data/BFCL_v4_<category>.json``: one case a line (its ``id``, the ``question``
  as chat messages, the ``function`` docs);
- ``bfcl_eval/data/possible_answer/BFCL_v4_<category>.json``: the ground truth;

and grades with ``bfcl_eval.eval_checker.ast_eval.ast_checker.ast_checker``, BFCL's own AST
checker, unchanged. That module imports ``constants.model_config`` only to look up, per
model name, whether the model's function names had ``.`` replaced by ``_`` (OpenAI-style
names allow no dots); importing the real module would import every vendor's handler and
their SDKs. Before the checker is imported, :func:`checker` puts a one-entry stand-in for
that module in ``sys.modules``: it answers ``underscore_to_dot=True`` for the one model name
this harness grades under (every system here sends names with ``_`` for ``.``, as BFCL's
OpenAI handlers do). Nothing else of the package is replaced.

**The sample.** Each category's cases are ordered by the SHA-256 of their ``id`` and the
first :data:`SAMPLE_SIZE` are taken (all of them when the category is smaller): the same
sample on every machine, spread over the whole category, and stable when BFCL appends cases.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.metadata
import json
import sys
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_CATEGORIES",
    "GRADING_MODEL",
    "SAMPLE_SIZE",
    "Case",
    "bfcl_version",
    "checker",
    "function_names",
    "grade",
    "load_cases",
    "openai_tools",
    "tool_name",
]

SAMPLE_SIZE = 50
DEFAULT_CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance")
GRADING_MODEL = "subagent-local-harness"
"""The model name the checker is called with (no ``_``: BFCL maps ``_`` to ``/`` in it)."""

GORILLA_TO_JSON_SCHEMA_FALLBACK = "string"


@dataclass(frozen=True)
class Case:
    """One BFCL question.

    Attributes:
        category: The BFCL category (``simple_python``, ``irrelevance``, ...).
        id: BFCL's id of the case.
        messages: The question as chat messages (the first and only user turn).
        functions: BFCL's function docs, as given.
        answer: The ground truth (``None`` for irrelevance categories: no call is right).
        digest: A digest of the case's lines, so an edited case runs again.
    """

    category: str
    id: str
    messages: tuple[Mapping[str, str], ...]
    functions: tuple[Mapping[str, Any], ...]
    answer: tuple[Mapping[str, Any], ...] | None
    digest: str

    @property
    def expects_no_call(self) -> bool:
        """Irrelevance cases: correct when no function is called."""
        return "irrelevance" in self.category

    @property
    def language(self) -> str:
        """The language BFCL grades the arguments in."""
        if self.category.endswith("java"):
            return "java"
        if self.category.endswith("javascript"):
            return "javascript"
        return "python"


def _package_dir() -> Path:
    import bfcl_eval

    return Path(bfcl_eval.__file__).resolve().parent


def bfcl_version() -> str:
    """The installed ``bfcl-eval`` version."""
    return importlib.metadata.version("bfcl-eval")


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def load_cases(category: str, sample_size: int | None = SAMPLE_SIZE) -> list[Case]:
    """The category's fixed sample (``sample_size=None``: every case), in sample order.

    Raises:
        ValueError: BFCL has no such single-turn category.
    """
    data = _package_dir() / "data"
    path = data / f"BFCL_v4_{category}.json"
    if not path.exists() or category.startswith(("multi_turn", "memory", "web_search")):
        available = sorted(
            p.name.removeprefix("BFCL_v4_").removesuffix(".json")
            for p in data.glob("BFCL_v4_*.json")
            if not p.name.startswith(("BFCL_v4_multi_turn", "BFCL_v4_memory", "BFCL_v4_web"))
        )
        raise ValueError(f"no single-turn BFCL category {category!r}; there are: {available}")
    answers: dict[str, dict[str, Any]] = {}
    answer_path = data / "possible_answer" / path.name
    if answer_path.exists():
        answers = {line["id"]: line for line in _lines(answer_path)}
    cases = []
    for line in _lines(path):
        truth = answers.get(line["id"])
        raw = json.dumps([line, truth], sort_keys=True)
        cases.append(
            Case(
                category=category,
                id=line["id"],
                messages=tuple(line["question"][0]),
                functions=tuple(line["function"]),
                answer=tuple(truth["ground_truth"]) if truth else None,
                digest=hashlib.sha256(raw.encode()).hexdigest()[:16],
            )
        )
    cases.sort(key=lambda case: hashlib.sha256(case.id.encode()).hexdigest())
    return cases if sample_size is None else cases[:sample_size]


# --- function docs as OpenAI tools ---------------------------------------------------------


def tool_name(name: str) -> str:
    """A BFCL function name as an OpenAI-style tool name (``math.hypot`` -> ``math_hypot``)."""
    return name.replace(".", "_")


def _json_types(properties: dict[str, Any], mapping: Mapping[str, str]) -> dict[str, Any]:
    """BFCL's Python-flavoured types (``dict``, ``float``, ``tuple``...) as JSON schema types.

    The same rules as BFCL's OpenAI handlers: types through ``GORILLA_TO_OPENAPI``, unknown
    ones as ``string``, a ``float`` told in the description, nested properties and items
    converted too.
    """
    for schema in properties.values():
        given = schema.get("type")
        if given == "float":
            schema["format"] = "float"
            schema["description"] = schema.get("description", "") + " This is a float type value."
        schema["type"] = mapping.get(given, GORILLA_TO_JSON_SCHEMA_FALLBACK) if given else "string"
        if "properties" in schema:
            schema["properties"] = _json_types(schema["properties"], mapping)
        items = schema.get("items")
        if isinstance(items, dict) and "type" in items:
            items["type"] = mapping.get(items["type"], GORILLA_TO_JSON_SCHEMA_FALLBACK)
            if "properties" in items:
                items["properties"] = _json_types(items["properties"], mapping)
            inner = items.get("items")
            if isinstance(inner, dict) and "type" in inner:
                inner["type"] = mapping.get(inner["type"], GORILLA_TO_JSON_SCHEMA_FALLBACK)
    return properties


def openai_tools(functions: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The function docs as OpenAI ``tools`` entries, the way BFCL sends them to OpenAI."""
    from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI

    tools = []
    for function in functions:
        item = copy.deepcopy(dict(function))
        item["name"] = tool_name(item["name"])
        parameters = item.setdefault("parameters", {"properties": {}})
        parameters["type"] = "object"
        parameters["properties"] = _json_types(parameters.get("properties", {}), GORILLA_TO_OPENAPI)
        item.pop("response", None)
        tools.append({"type": "function", "function": item})
    return tools


def function_names(case: Case) -> list[str]:
    """The names the case's functions go by as tools."""
    return [tool_name(function["name"]) for function in case.functions]


# --- grading --------------------------------------------------------------------------------


class _ModelConfig:
    underscore_to_dot = True


@cache
def checker() -> Callable[..., dict[str, Any]]:
    """BFCL's ``ast_checker``, imported with the one-entry model-config stand-in."""
    name = "bfcl_eval.constants.model_config"
    if name not in sys.modules:
        stand_in = types.ModuleType(name)
        stand_in.MODEL_CONFIG_MAPPING = {GRADING_MODEL.replace("_", "/"): _ModelConfig()}  # type: ignore[attr-defined]
        sys.modules[name] = stand_in
    from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker

    return ast_checker  # type: ignore[no-any-return]


def grade(case: Case, calls: Sequence[Mapping[str, Any]]) -> tuple[bool, str]:
    """Whether ``calls`` answer ``case``, by BFCL's checker, and why not.

    Args:
        case: The case.
        calls: The calls made, as ``{"name": ..., "arguments": {...}}``.

    Returns:
        ``(correct, error)``; an irrelevance case is correct when no function was called.
    """
    if case.expects_no_call:
        return (not calls, "" if not calls else "a function was called")
    if not calls:
        return (False, "no function was called")
    from bfcl_eval.constants.enums import Language

    language = {
        "python": Language.PYTHON,
        "java": Language.JAVA,
        "javascript": Language.JAVASCRIPT,
    }[case.language]
    output = [{call["name"]: call.get("arguments") or {}} for call in calls]
    try:
        result = checker()(
            list(case.functions),
            output,
            list(case.answer or ()),
            language,
            case.category,
            GRADING_MODEL,
        )
    except Exception as exc:  # the checker's own failure on malformed output is a wrong answer
        return (False, f"checker: {type(exc).__name__}: {exc}")
    errors = result.get("error") or []
    return (bool(result.get("valid")), "; ".join(str(e) for e in errors)[:300])
