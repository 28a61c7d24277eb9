"""Tools: typed Python callables offered to the model.

A tool's parameter schema comes from its signature through pydantic, its description from
its docstring (the summary, and per-parameter text from a Google-style ``Args:`` section or
``Annotated[..., Field(description=...)]``). Arguments from the model are validated before
the call; unknown arguments are pruned (and recorded) by default, and a validation error
names the field, what was received and what was expected, and goes back to the model.

A tool may also take its JSON schema as given (:meth:`Tool.from_schema`): the schema is sent
to the model unchanged and the arguments are validated against it by ``jsonschema``.

A tool may return a plain value (serialised for the model) or a :class:`ToolOutput`, which
can end the run with its value (``final=True``) or hand Python objects to the next tool call
without showing them to the model (``extras``, received by parameters marked
:data:`FromExtras`).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import inspect
import json
import re
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar, get_type_hints, overload

import anyio.to_thread
import jsonschema
import jsonschema.exceptions
import jsonschema.validators
from pydantic import BaseModel, ConfigDict, Field, PydanticUserError, ValidationError, create_model
from pydantic_core import to_json

from subagent._checks import check_seconds
from subagent._context import RunContext, takes_run_context
from subagent._errors import ConfigurationError, SubAgentError
from subagent._text import MAX_ARGUMENT_DEPTH, nested_deeper_than, shorten
from subagent.llm import ToolDefinition
from subagent.records import Step
from subagent.tools._patterns import (
    UnsafePatternError,
    compiled_pattern,
    pattern_search,
    schema_patterns,
)
from subagent.tools._schema_defaults import admitting_defaults

__all__ = [
    "FromExtras",
    "NestedRunError",
    "Tool",
    "ToolArgumentsError",
    "ToolOutput",
    "ToolTimeoutError",
    "build_tools",
    "inline_definitions",
    "render_result",
    "tool",
]

_ARGS_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters):\s*$", re.MULTILINE)
_SECTION = re.compile(r"^\s*[A-Z][A-Za-z ]*:\s*$", re.MULTILINE)
_ARG_LINE = re.compile(r"^\s{2,}(\w+)(?:\s*\([^)]*\))?\s*:\s*(.*)$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")

F = TypeVar("F", bound=Callable[..., Any])


class _FromExtras:
    """The marker behind :data:`FromExtras`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "FromExtras"


FromExtras = _FromExtras()
"""Marks a tool parameter as filled from the previous tool call's ``extras``.

``conn: Annotated[Connection | None, FromExtras] = None``: the parameter is not in the
schema the model sees; when the previous tool turn returned
``ToolOutput(..., extras={"conn": ...})``, the call receives that object. It needs a default,
used when no extras name it.
"""


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """What a tool may return instead of a plain value.

    Args:
        value: The result: shown to the model (serialised like a plain return value), or
            with ``final``, the run's answer.
        final: End the run ``done`` with ``value`` as its output. The value goes through the
            agent's output contract and validators like any return; if it does not pass,
            the model is told why and the run goes on.
        extras: Python objects handed to the next tool turn's calls, as keyword arguments of
            their parameters marked :data:`FromExtras`. Never shown to the model; cleared
            after that turn.
        step: The Step of an agent the tool ran: kept on the call's
            :class:`~subagent.ToolResult`, its usage counted as the caller's nested usage
            (``as_tool()`` does this).
    """

    value: Any = None
    final: bool = False
    extras: Mapping[str, Any] = field(default_factory=dict)
    step: Step[Any] | None = None


class NestedRunError(SubAgentError):
    """An agent run by a tool failed; the tool call fails with the agent's Step kept.

    Attributes:
        step: The failed run's Step.
    """

    def __init__(self, message: str, step: Step[Any] | None = None):
        super().__init__(message)
        self.step = step


class ToolArgumentsError(Exception):
    """The model's arguments do not fit the tool's signature (or its JSON schema).

    Attributes:
        validation: pydantic's error, for a tool built from a signature.
        items: Per-argument feedback (``location``, ``message``, ``received``), for a tool
            built from a JSON schema.
    """

    def __init__(self, errors: ValidationError | str, items: list[dict[str, str]] | None = None):
        self.validation = errors if isinstance(errors, ValidationError) else None
        self.items = items
        super().__init__(str(errors))


class ToolTimeoutError(TimeoutError):
    """A tool call ran past its :attr:`Tool.timeout` (not a timeout raised by the tool).

    Attributes:
        timeout: The tool's timeout, in seconds.
    """

    def __init__(self, timeout: float):
        super().__init__(f"the tool did not finish within {timeout:g} s")
        self.timeout = timeout


@dataclass(frozen=True, eq=False)
class Tool:
    """A callable the model may call in ``normal`` turns.

    Build one with :func:`tool` (a decorator), or let ``SubAgent(tools=[f])`` wrap a plain
    function; a :class:`Tool` is callable like its function.

    Args:
        function: The callable (sync or async).
        name: The name the model sees (default: the function's name).
        description: What the model is told (default: the docstring's summary).
        run_in_thread: Run a sync function in a worker thread (default) so a slow tool does
            not block the event loop; set ``False`` for cheap functions (it saves the
            thread hop, a large part of a tool turn's cost).
        timeout: Seconds the call may take (``None``: no limit of its own); past it the
            model is told the tool timed out. A sync tool in a thread is abandoned, not
            killed: see :meth:`call`.
        prune_unknown_args: Drop arguments the signature does not have, and record their
            names (``None``: the agent's setting, which defaults to ``True``); with
            ``False`` they are reported to the model as invalid. For a tool with a
            ``parameters`` schema this applies only when the schema says
            ``additionalProperties: false``; otherwise unknown arguments are passed on.
        parameters: A JSON schema for the arguments, used instead of the signature: see
            :meth:`from_schema`.
        requires_approval: A call of this tool waits for a decision: the run pauses before
            running any call of that turn and returns a paused Step (see
            ``SubAgent.resume``).
    """

    function: Callable[..., Any]
    name: str = ""
    description: str | None = None
    run_in_thread: bool = True
    timeout: float | None = None
    prune_unknown_args: bool | None = None
    parameters: Mapping[str, Any] | None = field(default=None, repr=False)
    requires_approval: bool = False
    _params: type[BaseModel] | None = field(init=False, repr=False)
    _validator: Any = field(init=False, repr=False)
    _fields: frozenset[str] = field(init=False, repr=False)
    _extras: frozenset[str] = field(init=False, repr=False)
    _definition: ToolDefinition = field(init=False, repr=False)
    _is_async: bool = field(init=False, repr=False)
    # The function's first parameter is a RunContext: passed by the run, not in the schema.
    _takes_context: bool = field(init=False, repr=False, default=False)

    def __post_init__(self) -> None:
        function = self.function
        if not callable(function):
            raise ConfigurationError("tools", f"{function!r} is not callable")
        name = self.name or getattr(function, "__name__", "")
        if not _NAME.match(name):
            raise ConfigurationError(
                "tools", f"tool name {name!r} must match {_NAME.pattern} (rename it with Tool)"
            )
        check_seconds("timeout", self.timeout)
        for flag in ("run_in_thread", "prune_unknown_args", "requires_approval"):
            value = getattr(self, flag)
            if not isinstance(value, bool) and not (flag == "prune_unknown_args" and value is None):
                raise ConfigurationError(flag, f"must be a bool, got {value!r} (tool {name!r})")
        if self.description is not None and not isinstance(self.description, str):
            raise ConfigurationError(
                "description", f"must be a str, got {self.description!r} (tool {name!r})"
            )
        summary, arg_docs = _parse_docstring(inspect.getdoc(function) or "")
        description = self.description if self.description is not None else summary
        params: type[BaseModel] | None = None
        validator: Any = None
        takes_context = takes_run_context(function)
        if self.parameters is None:
            params, schema, extras = _parameters_model(function, name, arg_docs, takes_context)
            fields = frozenset(params.model_fields)
        else:
            schema, validator = _checked_schema(self.parameters, name)
            extras = frozenset()
            fields = _closed_properties(schema)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "description", description)
        object.__setattr__(self, "_params", params)
        object.__setattr__(self, "_validator", validator)
        object.__setattr__(self, "_fields", fields)
        object.__setattr__(self, "_extras", extras)
        object.__setattr__(
            self,
            "_definition",
            ToolDefinition(name=name, description=description, parameters=schema),
        )
        object.__setattr__(self, "_is_async", _is_async_callable(function))
        object.__setattr__(self, "_takes_context", takes_context)

    @classmethod
    def from_function(cls, function: Callable[..., Any], **options: Any) -> Tool:
        """Build a tool from ``function``; ``options`` are the other constructor fields."""
        return cls(function, **options)

    @classmethod
    def from_schema(
        cls,
        name: str,
        description: str,
        parameters: Mapping[str, Any],
        function: Callable[..., Any],
        **options: Any,
    ) -> Tool:
        """Build a tool whose arguments are described by a JSON schema, not a signature.

        The schema is sent to the model exactly as given (nothing added or rewritten), and
        the model's arguments are validated against it with ``jsonschema`` (the dialect its
        ``$schema`` names, else the latest). An invalid call is fed back to the model like
        any tool's invalid arguments, naming the argument, what was received and what the
        schema expects. ``function`` (sync or async) receives the validated arguments as
        keyword arguments: the parsed JSON values, not coerced.

        Arguments the schema does not list are pruned (or refused, with
        ``prune_unknown_args=False``) only when the schema says
        ``additionalProperties: false``; otherwise they are passed on to ``function``.

        Args:
            name: The name the model sees.
            description: What the model is told.
            parameters: The JSON schema of the arguments (an object schema).
            function: The callable.
            **options: The other fields of :class:`Tool` (``run_in_thread``, ``timeout``,
                ``prune_unknown_args``).

        Raises:
            ConfigurationError: The schema is not a valid JSON schema (or not JSON), its
                root is not ``"type": "object"`` (what OpenAI-compatible servers accept),
                or an option is invalid; the message names the tool.
        """
        return cls(function, name=name, description=description, parameters=parameters,
                   **options)  # fmt: skip

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function directly (no validation): a decorated tool stays usable."""
        return self.function(*args, **kwargs)

    @property
    def definition(self) -> ToolDefinition:
        """What the model is told about this tool."""
        return self._definition

    @property
    def takes_context(self) -> bool:
        """Whether the function's first parameter is a :class:`~subagent.RunContext`."""
        return self._takes_context

    @property
    def extras_parameters(self) -> frozenset[str]:
        """The parameters filled from the previous tool call's extras."""
        return self._extras

    def prune(self, arguments: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """``arguments`` without the keys the signature does not have, and those keys.

        A tool built from a JSON schema prunes only when the schema closes its properties
        (``additionalProperties: false``); then the keys neither in ``properties`` nor
        matching ``patternProperties`` go.
        """
        if self._params is None:
            if not _closes_properties(self._definition.parameters):
                return dict(arguments), []
            patterns = self._definition.parameters.get("patternProperties") or {}
            unknown = [
                key for key in arguments
                if key not in self._fields and not _matches_any(patterns, key)
            ]  # fmt: skip
        else:
            fields = self._fields
            unknown = [key for key in arguments if key not in fields]
        if not unknown:
            return dict(arguments), []
        dropped = set(unknown)
        return {key: value for key, value in arguments.items() if key not in dropped}, unknown

    def validate_arguments(self, arguments: Mapping[str, Any] | str) -> dict[str, Any]:
        """Check the model's arguments against the signature.

        Raises:
            ToolArgumentsError: They are not a JSON object (or one nested more than 100
                levels deep), or do not fit.
        """
        if (
            isinstance(arguments, str)
            or not isinstance(arguments, Mapping)
            or nested_deeper_than(arguments, MAX_ARGUMENT_DEPTH)
        ):
            shown = arguments if isinstance(arguments, str) else "(a deeper object)"
            raise ToolArgumentsError(
                f"arguments must be a JSON object nested at most {MAX_ARGUMENT_DEPTH} levels "
                f"deep, got {shown[:200]!r}"
            )
        if self._params is None:
            return _validate_with_schema(self._validator, arguments)
        try:
            validated = self._params.model_validate(arguments)
        except ValidationError as exc:
            raise ToolArgumentsError(exc) from exc
        return {name: getattr(validated, name) for name in type(validated).model_fields}

    async def call(
        self,
        arguments: Mapping[str, Any] | str,
        extras: Mapping[str, Any] | None = None,
        context: RunContext[Any] | None = None,
    ) -> Any:
        """Validate ``arguments`` and call the function (awaiting it if async).

        ``extras`` fill the parameters marked :data:`FromExtras` (others are ignored).
        ``context`` is passed as the first argument of a function that takes a
        :class:`~subagent.RunContext` (:attr:`takes_context`). Under
        :attr:`timeout`, or when the run is cancelled, an async tool is cancelled; a sync
        tool in a worker thread is abandoned: the call returns at once, the thread runs on
        until the function returns, and its result is dropped (Python cannot stop a
        thread). Give blocking tools their own timeouts to release what they hold.

        Raises:
            ToolArgumentsError: The arguments do not fit the signature.
            ToolTimeoutError: The call took longer than :attr:`timeout` (a
                :class:`TimeoutError`).
            TypeError: The function takes a context and none was given.
            Exception: Whatever the function raises, a ``TimeoutError`` of its own
                included.
        """
        kwargs = self.validate_arguments(arguments)
        if extras and self._extras:
            kwargs.update({key: value for key, value in extras.items() if key in self._extras})
        function = self.function
        if self._takes_context:
            if context is None:
                raise TypeError(f"tool {self.name!r} takes a RunContext: pass context=")
            function = functools.partial(function, context)
        if self.timeout is None:
            return await self._invoke(function, kwargs)
        with anyio.move_on_after(self.timeout):
            return await self._invoke(function, kwargs)
        raise ToolTimeoutError(self.timeout)

    async def _invoke(self, function: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
        if self._is_async:
            return await function(**kwargs)
        if self.run_in_thread:
            return await anyio.to_thread.run_sync(
                functools.partial(function, **kwargs), abandon_on_cancel=True
            )
        return function(**kwargs)


@overload
def tool(function: F, /) -> Tool: ...
@overload
def tool(
    *,
    name: str = "",
    description: str | None = None,
    run_in_thread: bool = True,
    timeout: float | None = None,
    prune_unknown_args: bool | None = None,
    requires_approval: bool = False,
) -> Callable[[F], Tool]: ...
def tool(
    function: Callable[..., Any] | None = None,
    /,
    *,
    name: str = "",
    description: str | None = None,
    run_in_thread: bool = True,
    timeout: float | None = None,
    prune_unknown_args: bool | None = None,
    requires_approval: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a function a :class:`Tool`: ``@tool`` or ``@tool(timeout=5, ...)``.

    The arguments are :class:`Tool`'s. The decorated name is the tool, still callable like
    the function.
    """
    options: dict[str, Any] = {
        "name": name,
        "description": description,
        "run_in_thread": run_in_thread,
        "timeout": timeout,
        "prune_unknown_args": prune_unknown_args,
        "requires_approval": requires_approval,
    }
    if function is not None:
        return Tool(function, **options)

    def decorate(decorated: Callable[..., Any]) -> Tool:
        return Tool(decorated, **options)

    return decorate


def build_tools(tools: Iterable[Tool | Callable[..., Any]]) -> dict[str, Tool]:
    """Normalise ``SubAgent(tools=...)`` to tools by name, rejecting duplicate names."""
    if isinstance(tools, str | bytes) or not isinstance(tools, Iterable):
        raise ConfigurationError("tools", f"must be a list of callables, got {tools!r}")
    by_name: dict[str, Tool] = {}
    for item in tools:
        built = item if isinstance(item, Tool) else Tool(item)
        if built.name in by_name:
            raise ConfigurationError("tools", f"two tools are named {built.name!r}")
        by_name[built.name] = built
    return by_name


def render_result(value: Any) -> str:
    """A tool's return value as the text the model sees.

    Raises:
        Exception: The value cannot be turned into text (the caller reports it).
    """
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


def _is_extras_parameter(annotation: Any) -> bool:
    return typing.get_origin(annotation) is Annotated and any(
        meta is FromExtras for meta in annotation.__metadata__
    )


def _parameters_model(
    function: Callable[..., Any], name: str, arg_docs: Mapping[str, str], takes_context: bool
) -> tuple[type[BaseModel], dict[str, Any], frozenset[str]]:
    """The model validating the tool's arguments, its JSON schema, and the extras parameters.

    With ``takes_context``, the first parameter (a :class:`~subagent.RunContext`) is left
    out: the run passes it, the model never sees it.

    Raises:
        ConfigurationError: A parameter cannot be validated by pydantic or described as
            JSON schema (the message names the tool and the parameter), takes ``*args`` or
            ``**kwargs``, or is marked ``FromExtras`` without a default.
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
    extras: set[str] = set()
    parameters = list(signature.parameters.values())
    for param in parameters[1:] if takes_context else parameters:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ConfigurationError(
                "tools", f"tool {name!r} takes *{param.name}; tools need named parameters"
            )
        annotation = hints.get(param.name, param.annotation)
        if annotation is inspect.Parameter.empty:
            annotation = Any
        if annotation is RunContext or typing.get_origin(annotation) is RunContext:
            raise ConfigurationError(
                "tools",
                f"parameter {param.name!r} of tool {name!r} is a RunContext: it must be the "
                f"tool's first parameter",
            )
        if _is_extras_parameter(annotation):
            if param.default is inspect.Parameter.empty:
                raise ConfigurationError(
                    "tools",
                    f"parameter {param.name!r} of tool {name!r} is filled from extras and "
                    f"needs a default (used when no extras name it)",
                )
            extras.add(param.name)
            continue
        default = ... if param.default is inspect.Parameter.empty else param.default
        doc = arg_docs.get(param.name)
        fields[param.name] = (annotation, Field(default, description=doc) if doc else default)
    try:
        model, schema = _model_and_schema(f"{name}_arguments", fields)
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
    return model, schema, frozenset(extras)


def _model_and_schema(
    model_name: str, fields: Mapping[str, Any]
) -> tuple[type[BaseModel], dict[str, Any]]:
    model = create_model(model_name, __config__=ConfigDict(extra="forbid"), **fields)
    schema = inline_definitions(model.model_json_schema())
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


def _checked_schema(parameters: Any, name: str) -> tuple[dict[str, Any], Any]:
    """A copy of a tool's JSON schema, checked, and the ``jsonschema`` validator for it.

    The checks (the meta-schema's above all: seconds for a schema of thousands of
    properties) are made once per schema: a schema met again (the same tool in another
    agent, an MCP listing fetched again) is known by the digest of its JSON.

    Raises:
        ConfigurationError: The schema is not a JSON object, holds values JSON cannot,
            is not a valid schema of its dialect, does not describe an object at its
            root, or has a pattern that cannot be matched in linear time (the message
            names the tool).
    """
    if not isinstance(parameters, Mapping):
        raise ConfigurationError(
            "tools",
            f"the parameters of tool {name!r} must be a JSON schema object (a dict), got "
            f"{type(parameters).__name__}",
        )
    try:
        schema = copy.deepcopy(dict(parameters))
        text = json.dumps(schema, allow_nan=False, sort_keys=True)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ConfigurationError(
            "tools", f"the JSON schema of tool {name!r} is not JSON: {exc}"
        ) from exc
    digest = hashlib.sha256(text.encode(errors="surrogatepass")).digest()
    checked = _CHECKED.get(digest)
    if checked is None:
        validator_class = _check_schema(schema, name, text)
        # Arguments are checked against the schema that accepts every documented default
        # (_schema_defaults); never changed once made, so shared like the class.
        checked = (validator_class, admitting_defaults(copy.deepcopy(schema), validator_class))
        if len(_CHECKED) >= _CHECKED_LIMIT:
            _CHECKED.pop(next(iter(_CHECKED)))
        _CHECKED[digest] = checked
    validator_class, widened = checked
    return schema, validator_class(widened)


_CHECKED_LIMIT = 4096
_CHECKED: dict[bytes, tuple[Any, dict[str, Any]]] = {}
"""The schemas checked so far, by the digest of their JSON: each one's validator class and
the schema its arguments are checked against (its documented defaults accepted)."""


def _check_schema(schema: dict[str, Any], name: str, text: str) -> Any:
    """The validator class for ``schema``, once it passes every check (see above)."""
    validator_class = _dialect(schema, name)
    try:
        validator_class.check_schema(schema)
    except jsonschema.exceptions.SchemaError as exc:
        where = "/".join(str(part) for part in exc.absolute_path) or "(root)"
        raise ConfigurationError(
            "tools",
            f"tool {name!r} has an invalid JSON schema at {where}: {shorten(exc.message, 300)}",
        ) from exc
    if schema.get("type") != "object":
        # OpenAI's API and the OpenAI-compatible servers refuse any other function schema.
        raise ConfigurationError(
            "tools",
            f'the JSON schema of tool {name!r} must describe an object ("type": "object" '
            f"at its root, as OpenAI-compatible servers require), got type "
            f"{schema.get('type')!r:.60}",
        )
    patterns = False
    for pattern, where in schema_patterns(schema):
        patterns = True
        try:
            compiled_pattern(pattern)
        except UnsafePatternError as exc:
            raise ConfigurationError(
                "tools", f"tool {name!r} has a pattern at {where} that is refused: {exc}"
            ) from None
    if patterns and '"unevaluatedProperties"' in text:
        # jsonschema finds the properties it evaluated with `re`; our keywords cannot reach it.
        raise ConfigurationError(
            "tools",
            f"tool {name!r} combines unevaluatedProperties with patterns, which the runtime "
            f"cannot check in linear time",
        )
    return _linear(validator_class) if patterns else validator_class


def _linear(base: Any) -> Any:
    """``base`` whose keywords that match patterns match them by RE2 (see ``_patterns``).

    ``pattern``, ``patternProperties`` and ``additionalProperties`` (which tells extra keys
    from those ``patternProperties`` match); jsonschema's own use ``re``.
    """
    extended = _LINEAR.get(base)
    if extended is None:
        extended = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
            base,
            {
                "pattern": _pattern_keyword,
                "patternProperties": _pattern_properties_keyword,
                "additionalProperties": _additional_properties_keyword,
            },
        )
        _LINEAR[base] = extended
    return extended


_LINEAR: dict[Any, Any] = {}


def _pattern_keyword(validator: Any, pattern: str, instance: Any, schema: Any) -> Any:
    if validator.is_type(instance, "string") and not pattern_search(pattern, instance):
        yield jsonschema.exceptions.ValidationError(
            f"{shorten(repr(instance), 200)} does not match {pattern!r}"
        )


def _pattern_properties_keyword(
    validator: Any, patterns: Mapping[str, Any], instance: Any, schema: Any
) -> Any:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if pattern_search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties_keyword(
    validator: Any, additional: Any, instance: Any, schema: Mapping[str, Any]
) -> Any:
    if not validator.is_type(instance, "object"):
        return
    listed = schema.get("properties") or {}
    patterns = schema.get("patternProperties") or {}
    extras = [key for key in instance if key not in listed and not _matches_any(patterns, key)]
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif additional is False and extras:
        shown = ", ".join(repr(extra) for extra in sorted(extras, key=str))
        yield jsonschema.exceptions.ValidationError(
            f"Additional properties are not allowed ({shorten(shown, 300)} unexpected)"
        )


def _dialect(schema: dict[str, Any], name: str) -> Any:
    """The validator class of the dialect ``$schema`` names (the latest draft without one).

    Raises:
        ConfigurationError: ``$schema`` names a dialect ``jsonschema`` does not know
            (rather than its warning and a silent fallback to the latest draft).
    """
    latest = jsonschema.validators.Draft202012Validator
    if "$schema" not in schema:
        return latest
    dialect = schema["$schema"]
    try:
        found = jsonschema.validators.validator_for(schema, default=latest)
        known = found is jsonschema.validators.validator_for(
            schema, default=jsonschema.validators.Draft7Validator
        )
    except Exception:  # a $schema that is not a URI string
        known = False
    if not isinstance(dialect, str) or not known:
        raise ConfigurationError(
            "tools",
            f"tool {name!r} names an unknown JSON schema dialect ($schema {dialect!r:.120})",
        )
    return found


def _closes_properties(schema: Mapping[str, Any]) -> bool:
    return schema.get("additionalProperties") is False


def _closed_properties(schema: Mapping[str, Any]) -> frozenset[str]:
    properties = schema.get("properties")
    return frozenset(properties) if isinstance(properties, Mapping) else frozenset()


def _matches_any(patterns: Mapping[str, Any], key: str) -> bool:
    return any(pattern_search(pattern, key) for pattern in patterns)


_MAX_ARGUMENT_ERRORS = 20


def _validate_with_schema(validator: Any, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """``arguments`` (as given) once they fit the schema.

    Raises:
        ToolArgumentsError: They do not, with one feedback item per problem.
    """
    try:
        errors = sorted(
            validator.iter_errors(arguments),
            key=lambda error: [str(part) for part in error.absolute_path],
        )
    except RecursionError:
        raise ToolArgumentsError(
            "arguments nest too deeply to validate",
            [{"location": "(arguments)", "message": "nest too deeply to validate",
              "received": ""}],
        ) from None  # fmt: skip
    if not errors:
        return dict(arguments)
    items = _schema_feedback(errors)
    text = "; ".join(f"{item['location']}: {item['message']}" for item in items)
    raise ToolArgumentsError(text, items)


def _unwidened(errors: list[Any]) -> list[tuple[Any, str | None]]:
    """The errors, each with the default its property also accepts (``None``: no such default).

    A property widened to accept its documented default (``_schema_defaults``) fails as an
    ``anyOf``: its feedback is what its own schema says, and that the default would do.
    """
    found: list[tuple[Any, str | None]] = []
    for error in errors:
        branches = error.validator_value
        if (
            error.validator == "anyOf" and isinstance(branches, list) and len(branches) == 2
            and isinstance(branches[1], Mapping) and list(branches[1]) == ["const"]
            and isinstance(branches[0], Mapping) and "default" in branches[0]
            and branches[0]["default"] == branches[1]["const"]
        ):  # fmt: skip
            own = [e for e in error.context if list(e.relative_schema_path)[:1] == [0]]
            default = _short_json(branches[1]["const"], 100)
            found.extend((inner, default) for inner in own[:1])
        else:
            found.append((error, None))
    return found


def _message(error: Any) -> str:
    """What one error says, as the feedback words it (an enum's values listed)."""
    if error.validator == "enum":
        return shorten(
            "should be one of: " + ", ".join(_short_json(v, 60) for v in error.validator_value),
            500,
        )
    if error.validator == "type":
        expected = error.validator_value
        types = expected if isinstance(expected, list) else [expected]
        return f"should be of type {' or '.join(map(str, types))}"
    return shorten(str(error.message), 300)


def _schema_feedback(errors: list[Any]) -> list[dict[str, str]]:
    """Per-argument feedback items from ``jsonschema``'s errors, as pydantic's are given."""
    items: list[dict[str, str]] = []
    seen: set[tuple[str, str]] = set()  # a missing property is reported once

    def add(path: list[str], message: str, received: str) -> None:
        location = ".".join(path) or "(root)"
        if (location, message) not in seen:
            seen.add((location, message))
            items.append({"location": location, "message": message, "received": received})

    for error, default in _unwidened(errors):
        path = [str(part) for part in error.absolute_path]
        kind, expected, instance = error.validator, error.validator_value, error.instance
        if default is not None:
            add(path, f"{_message(error)}, or its default {default}", _short_json(instance))
        elif kind == "required" and isinstance(instance, Mapping):
            for missing in expected:
                if missing not in instance:
                    add([*path, str(missing)], "Field required", "")
        elif kind == "additionalProperties" and isinstance(instance, Mapping):
            listed = error.schema.get("properties") or {}
            patterns = error.schema.get("patternProperties") or {}
            for key, value in instance.items():
                if key not in listed and not _matches_any(patterns, key):
                    add([*path, str(key)], "unexpected: the schema does not allow it",
                        _short_json(value))  # fmt: skip
        elif kind in ("type", "enum"):
            add(path, _message(error), _short_json(instance))
        elif kind == "const":
            add(path, f"should be {_short_json(expected, 200)}", _short_json(instance))
        else:
            message = error.message
            if error.context:
                closest = jsonschema.exceptions.best_match(error.context)
                inner = ".".join(str(part) for part in closest.relative_path)
                message = f"{message} (closest: {inner + ': ' if inner else ''}{closest.message})"
            add(path, shorten(message, 300), _short_json(instance))
    if len(items) > _MAX_ARGUMENT_ERRORS:
        more = len(items) - _MAX_ARGUMENT_ERRORS
        items = items[:_MAX_ARGUMENT_ERRORS]
        items.append({"location": "(more)", "message": f"{more} more error(s)", "received": ""})
    return items


def _short_json(value: Any, limit: int = 200) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, default=repr)
    except (TypeError, ValueError, RecursionError):
        text = "(unprintable)"
    return shorten(text, limit)


def inline_definitions(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with its ``$ref``s to ``$defs`` replaced by the definitions themselves.

    pydantic puts nested models under ``$defs``; OpenAI accepts that, but many
    OpenAI-compatible servers (llama.cpp's grammar conversion among them) resolve ``$ref``
    poorly or not at all. A recursive model cannot be inlined: its schema keeps ``$defs``.
    """
    definitions = schema.get("$defs")
    if not definitions:
        return schema

    def resolve(node: Any, seen: tuple[str, ...]) -> Any:
        if isinstance(node, dict):
            reference = node.get("$ref")
            if isinstance(reference, str) and reference.startswith("#/$defs/"):
                key = reference.removeprefix("#/$defs/")
                if key in seen or key not in definitions:
                    raise _Recursive
                merged = {**definitions[key], **{k: v for k, v in node.items() if k != "$ref"}}
                return resolve(merged, (*seen, key))
            return {k: resolve(v, seen) for k, v in node.items() if k != "$defs"}
        if isinstance(node, list):
            return [resolve(item, seen) for item in node]
        return node

    try:
        resolved: dict[str, Any] = resolve(schema, ())
    except _Recursive:
        return schema
    return resolved


class _Recursive(Exception):
    """A ``$ref`` that refers back to a definition being inlined."""


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
