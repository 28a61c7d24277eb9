"""Prompt templates: Mustache, parsed by chevron, rendered strictly.

chevron's own renderer HTML-escapes ``{{x}}`` (``"`` becomes ``&quot;``, corrupting JSON in
feedback) and renders a missing variable as an empty string. Prompts need the opposite, so
templates are tokenized once by chevron into a tree, and this module renders that tree:
values are inserted verbatim, and a name that no scope defines raises
:class:`~subagent.MissingVariableError` naming it. A structured value (a dict, a list, a
tuple, a set, a pydantic model, a dataclass) is inserted as JSON, not as its Python repr.

Overrides are checked when they are set (:meth:`TemplateSet.with_overrides`, when an agent
is built): each may read only the variables the runtime gives that template
(:data:`TEMPLATE_VARIABLES`), and the system prompts must keep the answer's format
(:data:`REQUIRED_VARIABLES`).
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, cast

import chevron.tokenizer
from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from subagent._errors import MissingVariableError, TemplateError

__all__ = [
    "REQUIRED_VARIABLES",
    "TEMPLATE_VARIABLES",
    "Template",
    "TemplateSet",
    "default_templates",
    "prompts_dir",
    "render_value",
]

_MISSING = object()
_MEMOISABLE = frozenset({str, int, float, bool, type(None)})
# Longer text (a tool result, a model's error) is unique to one render: not worth keeping.
_MEMO_TEXT = 256


# The top-level variables the runtime gives each shipped template when it renders it (a
# partial sees the variables of the template including it: tool_list is system's). An
# override may read these only; a test keeps the table true to the shipped templates.
_SYSTEM = frozenset({"agent_name", "has_tools", "tools", "output_instructions", "allow_fail"})
TEMPLATE_VARIABLES: dict[str, frozenset[str]] = {
    "answer_json": frozenset({"schema"}),
    "answer_text": frozenset(),
    "divider_empty": frozenset(),
    "divider_missing": frozenset({"found_one"}),
    "error_feedback": frozenset({"error_message", "final_turn", "turns_left", "has_tools"}),
    "fail_not_allowed": frozenset({"reason"}),
    "fail_beside_answer": frozenset(),
    "tool_edited": frozenset({"name", "arguments"}),
    "invalid_output": frozenset({"errors"}),
    "json_not_found": frozenset(),
    "json_syntax_error": frozenset({"message", "line", "column", "excerpt", "fence"}),
    "must_return_warning": frozenset({"has_tools", "has_retries", "retry_count"}),
    "non_finite_output": frozenset({"location"}),
    "output_json": frozenset({"schema", "example"}),
    "output_text": frozenset(),
    "react_invalid": frozenset({"problem"}),
    "react_observation": frozenset({"results"}),
    "react_system": frozenset(
        {
            "agent_name",
            "has_tools",
            "tools",
            "example_tool",
            "example_input",
            "answer_format",
            "allow_fail",
        }
    ),
    "reply_too_long": frozenset({"length", "limit"}),
    "retry_feedback": frozenset({"error_message", "current_retry", "total_retries", "repeated"}),
    "sections_instructions": frozenset({"headers", "any", "regex"}),
    "sections_missing": frozenset({"missing", "count", "example"}),
    "sections_none_found": frozenset({"headers"}),
    "system": _SYSTEM,
    "tool_arguments_invalid": frozenset({"name", "errors", "call_again"}),
    "tool_call_as_text": frozenset({"tool_names", "offered"}),
    "tool_calls_over_limit": frozenset({"count", "limit", "name"}),
    "tool_error": frozenset({"name", "error", "fence"}),
    "tool_denied": frozenset({"name", "reason", "fence"}),
    "tool_final_invalid": frozenset({"name", "error", "tools_left"}),
    "tool_calls_rule": _SYSTEM,
    "tool_list": _SYSTEM,
    "tool_result": frozenset({"name", "content", "fence", "cut_chars", "total_chars"}),
    "tools_unavailable": frozenset({"tool_names"}),
    "truncated_reply": frozenset(),
    "unknown_tool": frozenset({"name", "available"}),
    "validation_failed": frozenset({"errors"}),
}
# What an override of a system prompt must keep: without it the model is never told the
# answer's format (the JSON schema, or the parser's instructions).
REQUIRED_VARIABLES: dict[str, str] = {
    "system": "output_instructions",
    "react_system": "answer_format",
}


def render_value(value: Any) -> str:
    """How a value is written into a prompt: text as is, structured values as JSON.

    Strings are inserted verbatim; dicts, lists, tuples, sets, pydantic models and
    dataclass instances as JSON (non-ASCII kept; values JSON has no form for, such as
    dates, as pydantic writes them, else as their ``str``); anything else as its ``str``.
    """
    kind = type(value)
    if kind is str:
        return cast(str, value)
    if kind is int or kind is float or kind is bool:  # the common case: counts and flags
        return str(value)
    if isinstance(value, Mapping | list | tuple | set | frozenset | BaseModel) or (
        dataclasses.is_dataclass(value) and not isinstance(value, type)
    ):
        return json.dumps(to_jsonable_python(value, fallback=str), ensure_ascii=False)
    return str(value)


@dataclass(frozen=True, slots=True)
class _Node:
    kind: str  # "literal", "var", "section", "inverted", "partial"
    key: str
    children: tuple[_Node, ...] = ()
    parts: tuple[str, ...] = ()  # the dotted name, split once at compile time

    def __post_init__(self) -> None:
        if self.kind != "literal" and self.key != ".":
            object.__setattr__(self, "parts", tuple(self.key.split(".")))


def _build_tree(name: str, source: str) -> tuple[_Node, ...]:
    stack: list[tuple[str, list[_Node]]] = [("", [])]
    try:
        for tag, key in chevron.tokenizer.tokenize(source):
            if tag == "literal":
                if key:
                    stack[-1][1].append(_Node("literal", key))
            elif tag in ("variable", "no escape"):
                stack[-1][1].append(_Node("var", key))
            elif tag in ("section", "inverted section"):
                stack.append((f"{tag}:{key}", []))
            elif tag == "end":
                opened, children = stack.pop()
                kind, _, opened_key = opened.partition(":")
                node_kind = "section" if kind == "section" else "inverted"
                stack[-1][1].append(_Node(node_kind, opened_key, tuple(children)))
            elif tag == "partial":
                stack[-1][1].append(_Node("partial", key))
            # comments and delimiter changes render nothing
    except chevron.tokenizer.ChevronError as exc:
        raise TemplateError(f"template {name!r} is not valid Mustache: {exc}", name) from exc
    if len(stack) != 1:
        raise TemplateError(f"template {name!r} has an unclosed section {stack[-1][0]!r}", name)
    return tuple(stack[0][1])


def _lookup(node: _Node, scopes: list[Any]) -> Any:
    parts = node.parts
    if not parts:  # "."
        return scopes[-1]
    head = parts[0]
    for scope in reversed(scopes):
        value = scope.get(head, _MISSING) if type(scope) is dict else _child(scope, head)
        if value is not _MISSING:
            break
    else:
        return _MISSING
    for name in parts[1:]:
        value = _child(value, name)
        if value is _MISSING:
            return _MISSING
    return value


def _child(scope: Any, name: str) -> Any:
    if isinstance(scope, Mapping):
        return scope.get(name, _MISSING)
    if isinstance(scope, list | tuple) and name.isdigit():
        index = int(name)
        return scope[index] if index < len(scope) else _MISSING
    if isinstance(scope, str | int | float | bool) or scope is None:
        return _MISSING
    return getattr(scope, name, _MISSING)


@dataclass(frozen=True, slots=True)
class Template:
    """One compiled template.

    Args:
        name: The template's name (``system``, ``retry_feedback``...), used in errors.
        source: The Mustache text.
    """

    name: str
    source: str
    _tree: tuple[_Node, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_tree", _build_tree(self.name, self.source))

    def variables(self) -> set[str]:
        """Top-level names the template reads outside any section."""
        return {node.key.partition(".")[0] for node in self._tree if node.kind != "literal"}

    def free_names(self) -> set[str]:
        """Top-level names the template reads from the data it is rendered with.

        Names outside any section, section names, and names inside inverted sections
        (which render in the same scope); not names inside a section, which may come from
        the section's item.
        """
        found: set[str] = set()
        stack = list(self._tree)
        while stack:
            node = stack.pop()
            if node.kind in ("var", "section", "inverted") and node.parts:
                found.add(node.parts[0])
            if node.kind == "inverted":
                stack.extend(node.children)
        return found

    def reads(self, name: str) -> bool:
        """Whether the template reads ``name`` anywhere (in a section too)."""
        stack = list(self._tree)
        while stack:
            node = stack.pop()
            if node.kind != "literal" and node.parts[:1] == (name,):
                return True
            stack.extend(node.children)
        return False

    def partials(self) -> set[str]:
        """Names of the templates this one includes (``{{> name}}``), at any depth."""
        found: set[str] = set()
        stack = list(self._tree)
        while stack:
            node = stack.pop()
            if node.kind == "partial":
                found.add(node.key)
            stack.extend(node.children)
        return found

    def check_partials(self, known: Iterable[str]) -> None:
        """Fail now, rather than mid-run, if this template includes an unknown partial.

        Raises:
            TemplateError: A ``{{> name}}`` names no template of ``known``.
        """
        unknown = sorted(self.partials() - set(known))
        if unknown:
            raise TemplateError(
                f"template {self.name!r} includes unknown partial(s) {unknown}", self.name
            )

    def render(self, data: Mapping[str, Any], partials: TemplateSet | None = None) -> str:
        """Render with ``data``; values are inserted verbatim (no HTML escaping).

        Raises:
            MissingVariableError: A variable or section name is not in any scope.
        """
        out: list[str] = []
        self._render(self._tree, [data], out, partials)
        return "".join(out)

    def _render(
        self,
        nodes: tuple[_Node, ...],
        scopes: list[Any],
        out: list[str],
        partials: TemplateSet | None,
    ) -> None:
        for node in nodes:
            kind = node.kind
            if kind == "literal":
                out.append(node.key)
                continue
            if kind == "partial":
                if partials is None or node.key not in partials:
                    raise TemplateError(
                        f"template {self.name!r} includes unknown partial {node.key!r}", self.name
                    )
                partials[node.key]._render(partials[node.key]._tree, scopes, out, partials)
                continue
            value = _lookup(node, scopes)
            if value is _MISSING:
                raise MissingVariableError(node.key, self.name)
            if kind == "var":
                if value is not None:
                    out.append(value if type(value) is str else render_value(value))
            elif kind == "section":
                if not value:
                    continue
                if isinstance(value, (list, tuple)):  # the tuple form is faster than list | tuple
                    for item in value:
                        scopes.append(item)
                        self._render(node.children, scopes, out, partials)
                        scopes.pop()
                else:
                    scopes.append(value)
                    self._render(node.children, scopes, out, partials)
                    scopes.pop()
            elif not value:  # inverted section
                self._render(node.children, scopes, out, partials)


def prompts_dir() -> Path:
    """Where the shipped templates are: inside the installed package, or the checkout's root."""
    packaged = Path(str(importlib.resources.files("subagent"))) / "prompts"
    if packaged.is_dir():
        return packaged
    checkout = Path(__file__).resolve().parent.parent / "prompts"
    if checkout.is_dir():
        return checkout
    raise TemplateError(f"prompt templates not found in {packaged} or {checkout}")


class TemplateSet(Mapping[str, Template]):
    """Named templates: the shipped defaults, optionally overridden by name.

    Renders whose values are all short scalars (counts, flags, names) are memoised: most
    prompts a run sends (the must-return warning, the tool list) are the same every time.
    At most 512 renders are kept, none with a text value over 256 characters.
    """

    _CACHE_LIMIT = 512

    def __init__(self, templates: Mapping[str, Template]):
        self._templates = dict(templates)
        self._rendered: dict[tuple[str, frozenset[tuple[str, Any]]], str] = {}

    def __getitem__(self, name: str) -> Template:
        return self._templates[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._templates)

    def __len__(self) -> int:
        return len(self._templates)

    def render(self, name: str, /, **data: Any) -> str:
        """Render template ``name`` with ``data`` (partials come from this set), stripped."""
        if not all(
            type(value) in _MEMOISABLE and (type(value) is not str or len(value) <= _MEMO_TEXT)
            for value in data.values()
        ):
            return self._templates[name].render(data, self).strip()
        key = (name, frozenset(data.items()))
        cached = self._rendered.get(key)
        if cached is None:
            cached = self._templates[name].render(data, self).strip()
            if len(self._rendered) >= self._CACHE_LIMIT:
                self._rendered.clear()
            self._rendered[key] = cached
        return cached

    def with_overrides(self, overrides: Mapping[str, str]) -> TemplateSet:
        """A copy where each named template is replaced by the given Mustache source.

        Raises:
            TemplateError: A name is not a known template, or a source does not parse.
        """
        if not overrides:
            return self
        if not isinstance(overrides, Mapping):
            raise TemplateError(
                f"prompt overrides must be a mapping of template name to Mustache source, "
                f"got {type(overrides).__name__}"
            )
        unknown = sorted(str(name) for name in set(overrides) - set(self._templates))
        if unknown:
            raise TemplateError(
                f"unknown prompt template(s) {unknown}; known: {sorted(self._templates)}",
                unknown[0],
            )
        merged = dict(self._templates)
        for name, source in overrides.items():
            if not isinstance(source, str):
                raise TemplateError(
                    f"prompt override {name!r} must be a Mustache string, "
                    f"got {type(source).__name__}",
                    name,
                )
            merged[name] = Template(name, source)
        for name in overrides:
            merged[name].check_partials(merged)
            _check_override(merged[name])
        return TemplateSet(merged)


def _check_override(template: Template) -> None:
    """Refuse an override that would fail or mislead mid-run: found when it is set.

    An override may read only the variables its template is given, and a system prompt
    must keep the answer's format.

    Raises:
        TemplateError: Naming the template, the variable, and what it is given.
    """
    name = template.name
    given = TEMPLATE_VARIABLES.get(name)
    if given is None:
        return
    unknown = sorted(template.free_names() - given)
    if unknown:
        listed = ", ".join(f"{{{{{variable}}}}}" for variable in unknown)
        offered = ", ".join(sorted(given)) or "none"
        raise TemplateError(
            f"prompt override {name!r} reads {listed}, which this template is not given "
            f"(its variables: {offered})",
            name,
        )
    required = REQUIRED_VARIABLES.get(name)
    if required is not None and not template.reads(required):
        raise TemplateError(
            f"prompt override {name!r} leaves out {{{{{required}}}}}: the model would never "
            f"be told the answer's format. Keep {{{{{required}}}}} in it; to add your own "
            f"text to the system prompt, use SubAgent(instructions=...) instead",
            name,
        )


@cache
def default_templates() -> TemplateSet:
    """The templates shipped in ``prompts/``, compiled once per process."""
    directory = prompts_dir()
    return TemplateSet(
        {
            path.stem: Template(path.stem, path.read_text(encoding="utf-8"))
            for path in sorted(directory.glob("*.mustache"))
        }
    )
