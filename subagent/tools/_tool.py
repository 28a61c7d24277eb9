"""Tools: typed Python callables offered to the model.

A tool's parameter schema comes from its signature through pydantic, its description from
its docstring (the summary, and per-parameter text from a Google-style ``Args:`` section).
Arguments from the model are validated before the call; a validation error names the field,
what was received and what was expected, and goes back to the model as feedback.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, get_type_hints

import anyio.to_thread
from pydantic import BaseModel, ConfigDict, Field, PydanticUserError, ValidationError, create_model
from pydantic_core import to_json

from subagent._errors import ConfigurationError
from subagent.llm import ToolDefinition

__all__ = ["Tool", "ToolArgumentsError", "build_tools", "render_result"]

_ARGS_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters):\s*$", re.MULTILINE)
_SECTION = re.compile(r"^\s*[A-Z][A-Za-z ]*:\s*$", re.MULTILINE)
_ARG_LINE = re.compile(r"^\s{2,}(\w+)(?:\s*\([^)]*\))?\s*:\s*(.*)$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")


class ToolArgumentsError(Exception):
    """The model's arguments do not fit the tool's signature."""

    def __init__(self, errors: ValidationError | str):
        self.validation = errors if isinstance(errors, ValidationError) else None
        super().__init__(str(errors))


@dataclass(frozen=True, eq=False)
class Tool:
    """A callable the model may call in ``normal`` turns.

    Build one from a function with :meth:`from_function` (``SubAgent(tools=[f])`` does it for
    you); pass a :class:`Tool` to rename it, describe it, or keep a sync function on the
    event loop.

    Args:
        function: The callable (sync or async).
        name: The name the model sees (default: the function's name).
        description: What the model is told (default: the docstring's summary).
        run_in_thread: Run a sync function in a worker thread (default) so a slow tool does
            not block the event loop; set ``False`` for trivial functions.
    """

    function: Callable[..., Any]
    name: str = ""
    description: str | None = None
    run_in_thread: bool = True
    _params: type[BaseModel] = field(init=False, repr=False)
    _definition: ToolDefinition = field(init=False, repr=False)
    _is_async: bool = field(init=False, repr=False)

    def __post_init__(self) -> None:
        function = self.function
        if not callable(function):
            raise ConfigurationError("tools", f"{function!r} is not callable")
        name = self.name or getattr(function, "__name__", "")
        if not _NAME.match(name):
            raise ConfigurationError(
                "tools", f"tool name {name!r} must match {_NAME.pattern} (rename it with Tool)"
            )
        summary, arg_docs = _parse_docstring(inspect.getdoc(function) or "")
        params, schema = _parameters_model(function, name, arg_docs)
        description = self.description if self.description is not None else summary
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "description", description)
        object.__setattr__(self, "_params", params)
        object.__setattr__(
            self,
            "_definition",
            ToolDefinition(name=name, description=description, parameters=schema),
        )
        object.__setattr__(self, "_is_async", _is_async_callable(function))

    @classmethod
    def from_function(cls, function: Callable[..., Any], **options: Any) -> Tool:
        """Build a tool from ``function``; ``options`` are the other constructor fields."""
        return cls(function, **options)

    @property
    def definition(self) -> ToolDefinition:
        """What the model is told about this tool."""
        return self._definition

    def validate_arguments(self, arguments: Mapping[str, Any] | str) -> dict[str, Any]:
        """Check the model's arguments against the signature.

        Raises:
            ToolArgumentsError: They are not a JSON object, or do not fit.
        """
        if isinstance(arguments, str):
            raise ToolArgumentsError(f"arguments must be a JSON object, got {arguments[:200]!r}")
        try:
            validated = self._params.model_validate(arguments)
        except ValidationError as exc:
            raise ToolArgumentsError(exc) from exc
        return {name: getattr(validated, name) for name in type(validated).model_fields}

    async def call(self, arguments: Mapping[str, Any] | str) -> Any:
        """Validate ``arguments`` and call the function (awaiting it if async).

        Raises:
            ToolArgumentsError: The arguments do not fit the signature.
            Exception: Whatever the function raises.
        """
        kwargs = self.validate_arguments(arguments)
        if self._is_async:
            return await self.function(**kwargs)
        if self.run_in_thread:
            return await anyio.to_thread.run_sync(functools.partial(self.function, **kwargs))
        return self.function(**kwargs)


def build_tools(tools: Iterable[Tool | Callable[..., Any]]) -> dict[str, Tool]:
    """Normalise ``SubAgent(tools=...)`` to tools by name, rejecting duplicate names."""
    if isinstance(tools, str | bytes) or not isinstance(tools, Iterable):
        raise ConfigurationError("tools", f"must be a list of callables, got {tools!r}")
    by_name: dict[str, Tool] = {}
    for item in tools:
        tool = item if isinstance(item, Tool) else Tool(item)
        if tool.name in by_name:
            raise ConfigurationError("tools", f"two tools are named {tool.name!r}")
        by_name[tool.name] = tool
    return by_name


def render_result(value: Any) -> str:
    """A tool's return value as the text the model sees."""
    if isinstance(value, str):
        return value
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    return to_json(value, fallback=repr).decode()


def _is_async_callable(function: Callable[..., Any]) -> bool:
    while isinstance(function, functools.partial):
        function = function.func
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(
        getattr(function, "__call__", None)  # noqa: B004 - async callable instances
    )


def _parameters_model(
    function: Callable[..., Any], name: str, arg_docs: Mapping[str, str]
) -> tuple[type[BaseModel], dict[str, Any]]:
    """The model validating the tool's arguments, and its JSON schema (without a title).

    Raises:
        ConfigurationError: A parameter cannot be validated by pydantic or described as
            JSON schema; the message names the tool and the parameter.
    """
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError("tools", f"cannot read the signature of {name!r}: {exc}") from exc
    try:
        hints = get_type_hints(function, include_extras=True)
    except Exception:  # unresolved forward references: fall back to raw annotations
        hints = {}
    fields: dict[str, Any] = {}
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ConfigurationError(
                "tools", f"tool {name!r} takes *{param.name}; tools need named parameters"
            )
        annotation = hints.get(param.name, param.annotation)
        if annotation is inspect.Parameter.empty:
            annotation = Any
        default = ... if param.default is inspect.Parameter.empty else param.default
        doc = arg_docs.get(param.name)
        fields[param.name] = (annotation, Field(default, description=doc) if doc else default)
    try:
        return _model_and_schema(f"{name}_arguments", fields)
    except (PydanticUserError, TypeError) as exc:
        culprit = _unsupported_parameter(fields)
        what = f"parameter {culprit!r} of tool {name!r}" if culprit else f"tool {name!r}"
        annotation = f" ({fields[culprit][0]!r})" if culprit else ""
        reason = str(exc).split("\n", 1)[0]
        raise ConfigurationError(
            "tools",
            f"{what} has a type{annotation} that pydantic cannot validate or describe as "
            f"JSON schema: {reason}",
        ) from exc


def _model_and_schema(
    model_name: str, fields: Mapping[str, Any]
) -> tuple[type[BaseModel], dict[str, Any]]:
    model = create_model(model_name, __config__=ConfigDict(extra="forbid"), **fields)
    schema = model.model_json_schema()
    schema.pop("title", None)
    return model, schema


def _unsupported_parameter(fields: Mapping[str, Any]) -> str | None:
    """The first parameter whose type alone breaks the model or its schema."""
    for parameter, definition in fields.items():
        try:
            _model_and_schema("parameter", {parameter: definition})
        except (PydanticUserError, TypeError):
            return parameter
    return None


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The summary (text before the first section) and Google-style ``Args:`` entries."""
    match = _ARGS_SECTION.search(doc)
    first_section = _SECTION.search(doc)
    summary_end = first_section.start() if first_section else len(doc)
    summary = " ".join(doc[:summary_end].split())
    args: dict[str, str] = {}
    if match:
        body = doc[match.end() :]
        following = _SECTION.search(body)
        body = body[: following.start()] if following else body
        current = None
        for line in body.splitlines():
            arg = _ARG_LINE.match(line)
            if arg and (current is None or len(line) - len(line.lstrip()) <= 4):
                current = arg.group(1)
                args[current] = arg.group(2).strip()
            elif current and line.strip():
                args[current] = f"{args[current]} {line.strip()}"
    return summary, args
