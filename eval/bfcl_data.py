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

**As a ``subagent.evals`` dataset.** A BFCL question is a :class:`~subagent.evals.Case`:
its name is BFCL's id, its messages the question, its context the function docs
(``{"functions": [...]}``: what the systems build their tools and prompts from), its
expected output BFCL's ground truth (``None`` on irrelevance categories, where calling
nothing is right), its tag the category. :class:`BfclChecker` is BFCL's checker as an evals
judge: an output's calls graded by ``ast_checker``. A failed run is never judged, so never
correct: on ``irrelevance``, no answer is not the answer "no call".
"""

from __future__ import annotations

import copy
import hashlib
import importlib.metadata
import json
import sys
import types
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from pydantic_core import to_jsonable_python

from subagent.evals import Case, Dataset, Judge, JudgeContext, Verdict

__all__ = [
    "DEFAULT_CATEGORIES",
    "GRADING_MODEL",
    "SAMPLE_SIZE",
    "BfclChecker",
    "bfcl_version",
    "calls_of",
    "category",
    "checker",
    "dataset",
    "expects_no_call",
    "function_names",
    "functions",
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


def category(case: Case[Any]) -> str:
    """The BFCL category of a case: its tag."""
    return case.tags[0]


def functions(case: Case[Any]) -> list[Mapping[str, Any]]:
    """BFCL's function docs of a case, as given."""
    return list(case.context["functions"])  # type: ignore[index]


def expects_no_call(case: Case[Any]) -> bool:
    """Irrelevance cases: correct when no function is called."""
    return "irrelevance" in category(case)


def _language(case: Case[Any]) -> str:
    """The language BFCL grades the arguments in."""
    if category(case).endswith("java"):
        return "java"
    if category(case).endswith("javascript"):
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


def load_cases(name: str, sample_size: int | None = SAMPLE_SIZE) -> list[Case[Any]]:
    """The category's fixed sample (``sample_size=None``: every case), in sample order.

    Each case's metadata keeps ``bfcl_digest``, a digest of its lines in BFCL's files (the
    harness keyed its records by it before ``subagent.evals``).

    Raises:
        ValueError: BFCL has no such single-turn category.
    """
    data = _package_dir() / "data"
    path = data / f"BFCL_v4_{name}.json"
    if not path.exists() or name.startswith(("multi_turn", "memory", "web_search")):
        available = sorted(
            p.name.removeprefix("BFCL_v4_").removesuffix(".json")
            for p in data.glob("BFCL_v4_*.json")
            if not p.name.startswith(("BFCL_v4_multi_turn", "BFCL_v4_memory", "BFCL_v4_web"))
        )
        raise ValueError(f"no single-turn BFCL category {name!r}; there are: {available}")
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
                name=line["id"],
                context={"functions": line["function"]},
                messages=list(line["question"][0]),
                expected=truth["ground_truth"] if truth else None,
                tags=(name,),
                metadata={"bfcl_digest": hashlib.sha256(raw.encode()).hexdigest()[:16]},
            )
        )
    cases.sort(key=lambda case: hashlib.sha256(case.name.encode()).hexdigest())
    return cases if sample_size is None else cases[:sample_size]


def dataset(name: str, cases: int | None = SAMPLE_SIZE, offset: int = 0) -> Dataset[Any]:
    """A category's cases as a dataset judged by BFCL's checker.

    ``cases`` cases of its fixed order after the first ``offset`` (``cases=None``: all of
    them).

    Raises:
        ValueError: BFCL has no such single-turn category.
    """
    chosen = load_cases(name, None if cases is None else offset + cases)[offset:]
    return Dataset(chosen, [BfclChecker()], name="bfcl")


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


def calls_schema(case: Case[Any]) -> dict[str, Any]:
    """The JSON schema of a list of calls to ``case``'s functions, and of nothing else.

    Each function's parameters accept their documented defaults (``admitting_defaults``:
    a ``"default": null`` or a default outside its ``enum``), as the tools' validation does.
    """
    from subagent.tools._schema_defaults import admitting_defaults

    calls = []
    for tool in openai_tools(functions(case)):
        function = tool["function"]
        calls.append({
            "type": "object",
            "properties": {"name": {"const": function["name"]},
                           "arguments": admitting_defaults(function["parameters"])},
            "required": ["name", "arguments"],
        })  # fmt: skip
    return {"type": "array", "items": {"anyOf": calls}}


def function_names(case: Case[Any]) -> list[str]:
    """The names the case's functions go by as tools."""
    return [tool_name(function["name"]) for function in functions(case)]


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


def grade(case: Case[Any], calls: Sequence[Mapping[str, Any]]) -> tuple[bool, str]:
    """Whether ``calls`` answer ``case``, by BFCL's checker, and why not.

    Args:
        case: The case.
        calls: The calls made, as ``{"name": ..., "arguments": {...}}``.

    Returns:
        ``(correct, error)``; an irrelevance case is correct when no function was called.
    """
    if expects_no_call(case):
        return (not calls, "" if not calls else "a function was called")
    if not calls:
        return (False, "no function was called")
    from bfcl_eval.constants.enums import Language

    language = {
        "python": Language.PYTHON,
        "java": Language.JAVA,
        "javascript": Language.JAVASCRIPT,
    }[_language(case)]
    output = [{call["name"]: call.get("arguments") or {}} for call in calls]
    try:
        result = checker()(
            functions(case),
            output,
            list(case.expected or ()),
            language,
            category(case),
            GRADING_MODEL,
        )
    except Exception as exc:  # the checker's own failure on malformed output is a wrong answer
        return (False, f"checker: {type(exc).__name__}: {exc}")
    errors = result.get("error") or []
    return (bool(result.get("valid")), "; ".join(str(e) for e in errors)[:300])


def calls_of(output: Any) -> list[dict[str, Any]]:
    """The calls an output makes.

    A list of calls (or one call) as models or JSON data, or the JSON text of one; anything
    else (prose, ``None``) calls nothing.
    """
    data = to_jsonable_python(output, fallback=repr)
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except ValueError:
            return []
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        return []
    return [dict(call) for call in data if isinstance(call, dict) and "name" in call]


class BfclChecker(Judge):
    """BFCL's checker as a judge.

    The output's calls (:func:`calls_of`) graded by ``ast_checker``; on an irrelevance case,
    correct when it calls nothing. The reason is the checker's finding.
    """

    name = "bfcl_checker"

    async def judge(self, ctx: JudgeContext[Any]) -> Verdict:
        """Grade the calls of ``ctx.output``."""
        correct, why = grade(ctx.case, calls_of(ctx.output))
        return Verdict(correct, why or None)
