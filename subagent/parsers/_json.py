"""A reusable parser for JSON replies validated by pydantic.

``json_parser(Model)`` turns a reply into a validated ``Model``: the JSON is extracted
tolerantly (bare, fenced, after prose, the last of several blocks, trailing commas and
``//`` comments repaired, see :mod:`subagent.parsers._json_extract`), then validated. Every failure
becomes feedback rendered from the prompt templates: no JSON (``json_not_found``), a syntax
error with its line, column and an excerpt (``json_syntax_error``), or one line per invalid
field with its location, message and the received value (``invalid_output``).
"""

from __future__ import annotations

import json
from collections.abc import Container, Iterable, Iterator
from typing import Any, Generic, TypeVar, overload

from pydantic import TypeAdapter, ValidationError

from subagent._errors import ConfigurationError
from subagent._templates import TemplateSet, default_templates
from subagent._text import fence, shorten
from subagent.parsers._example import schema_example
from subagent.parsers._json_extract import JSONExtraction, iter_json_candidates, object_sequence
from subagent.parsers._result import ParseResult

__all__ = ["JSONParser", "format_validation_errors", "json_parser", "validation_summary"]

T = TypeVar("T")
_RECEIVED_LIMIT = 80


def format_validation_errors(exc: ValidationError) -> list[dict[str, str]]:
    """Per-field feedback items for the ``invalid_output`` template.

    Each item has ``location`` (dotted path such as ``items.0.name``, or ``(root)``),
    ``message`` (pydantic's message) and ``received`` (a short JSON rendering of the invalid
    input, ``""`` when the field is missing).
    """
    items: list[dict[str, str]] = []
    for error in exc.errors(include_url=False):
        location = ".".join(str(part) for part in error["loc"]) or "(root)"
        received = "" if error["type"] == "missing" else _short_repr(error.get("input"))
        items.append({"location": location, "message": error["msg"], "received": received})
    return items


def validation_summary(exc: ValidationError, field_names: Container[str] = ()) -> str:
    """The fields that failed and pydantic's error types, without the values received.

    ``value: int_parsing; items.0.name: missing``: what a trace may show of an invalid
    output when message content is not captured. A location may hold a key the reply made
    up (an extra field, a key of a ``dict``), so a name not in ``field_names`` (the
    schema's, see :func:`schema_names`) is written ``*``.
    """

    def where(loc: tuple[int | str, ...]) -> str:
        named = (str(part) if isinstance(part, int) or part in field_names else "*" for part in loc)
        return ".".join(named) or "(root)"

    return "; ".join(
        f"{where(error['loc'])}: {error['type']}" for error in exc.errors(include_url=False)
    )


def schema_names(schema: Any) -> frozenset[str]:
    """Every name a JSON schema defines: properties, titles, ``$defs`` and constants.

    These are the schema author's words, safe to show in :func:`validation_summary`.
    """
    names: set[str] = set()
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            for key in ("properties", "$defs"):
                if isinstance(node.get(key), dict):
                    names.update(node[key])
            for key in ("title", "const"):
                if isinstance(node.get(key), str):
                    names.add(node[key])
            if isinstance(node.get("enum"), list):
                names.update(value for value in node["enum"] if isinstance(value, str))
            stack.extend(node.values())
    return frozenset(names)


def _short_repr(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):
        text = repr(value)
    return shorten(text, _RECEIVED_LIMIT)


class JSONParser(Generic[T]):
    """A parser for JSON replies validated as ``output_type``; see :func:`json_parser`.

    Attributes:
        output_type: The type replies validate to.
        schema: Its JSON schema.
        schema_text: The schema as compact JSON text.
        example: The schema's shape with placeholders (:func:`schema_example`), shown
            beside it in the output instructions; ``None`` when it would add nothing.
        instructions: The output instructions the runtime adds to the system prompt.
    """

    __name__ = "json_parser"

    def __init__(self, output_type: Any, *, instructions: str | None = None):
        try:
            self._adapter: TypeAdapter[T] = TypeAdapter(output_type)
            self.schema: dict[str, Any] = self._adapter.json_schema()
        except Exception as exc:
            raise ConfigurationError(
                "output_type", f"{output_type!r} cannot be validated by pydantic: {exc}"
            ) from exc
        self.output_type = output_type
        self.schema_text = json.dumps(self.schema, separators=(",", ":"))
        self.example = schema_example(self.schema)
        self._shape = {"object": "{", "array": "["}.get(str(self.schema.get("type")))
        self._names = schema_names(self.schema)  # what an error summary may name
        if instructions is None:
            instructions = default_templates().render(
                "output_json", schema=self.schema_text, example=self.example
            )
        self.instructions = instructions.strip()

    def __call__(self, text: str, *, templates: TemplateSet | None = None) -> ParseResult:
        """Parse ``text`` into a validated value, or feedback; never raises for any text.

        The first candidate (in :func:`~subagent.parsers._json_extract.iter_json_candidates` order)
        that decodes and validates wins. When the schema expects an object (or an array),
        candidates of that shape are preferred, so a stray ``[1]`` in the prose does not
        shadow the answer; when it expects an array, a reply made of several objects one
        after another is first read as the list of them. When nothing validates, the
        feedback is about the most plausible candidate: its syntax error, or its
        validation errors.
        """
        stripped = text.strip()
        if self._shape is not None and stripped.startswith(self._shape):
            # The common case, the whole reply is the answer: one pass of pydantic's JSON
            # validator. Anything else takes the general path below.
            try:
                return ParseResult.success(self._adapter.validate_json(stripped))
            except ValidationError as exc:
                if all(error["type"] != "json_invalid" for error in exc.errors()):
                    # The whole reply decoded, so it is the only candidate: its schema
                    # errors are the feedback (the general path would find the same).
                    errors = format_validation_errors(exc)
                    templates = templates or default_templates()
                    return ParseResult.error(
                        templates.render("invalid_output", errors=errors).strip(),
                        summary=validation_summary(exc, self._names),
                    )
        templates = templates or default_templates()
        other_shapes: list[JSONExtraction] = []

        def preferred() -> Iterator[JSONExtraction]:
            if self._shape == "[":  # a list written as its objects, one after another
                listed = object_sequence(text)
                if listed is not None:
                    yield listed
            for candidate in iter_json_candidates(text):
                if self._shape is None or candidate.text.startswith(self._shape):
                    yield candidate
                else:
                    other_shapes.append(candidate)

        # Other shapes are tried only when no candidate of the preferred shape exists.
        outcome, first_failure = self._first_valid(preferred())
        if outcome is None and first_failure is None:
            outcome, first_failure = self._first_valid(other_shapes)
        if outcome is not None:
            return outcome
        if first_failure is None:
            return ParseResult.error(templates.render("json_not_found").strip(),
                                     summary="no JSON found")  # fmt: skip
        if isinstance(first_failure, ValidationError):
            errors = format_validation_errors(first_failure)
            return ParseResult.error(
                templates.render("invalid_output", errors=errors).strip(),
                summary=validation_summary(first_failure, self._names),
            )
        return ParseResult.error(
            templates.render(
                "json_syntax_error",
                message=first_failure.error,
                line=first_failure.line,
                column=first_failure.column,
                excerpt=first_failure.excerpt,
                fence=fence(first_failure.excerpt),
            ).strip(),
            summary=f"invalid JSON at line {first_failure.line} column {first_failure.column}",
        )

    def _first_valid(
        self, candidates: Iterable[JSONExtraction]
    ) -> tuple[ParseResult | None, JSONExtraction | ValidationError | None]:
        """The first candidate that validates, else the first failure."""
        first_failure: JSONExtraction | ValidationError | None = None
        for candidate in candidates:
            outcome = self._validate(candidate)
            if isinstance(outcome, ParseResult):
                return outcome, None
            if first_failure is None:
                first_failure = outcome
        return None, first_failure

    def _validate(
        self, candidate: JSONExtraction
    ) -> ParseResult | JSONExtraction | ValidationError:
        if not candidate.ok:
            return candidate
        try:
            return ParseResult.success(self._adapter.validate_json(candidate.text))
        except ValidationError as exc:
            return exc

    def __repr__(self) -> str:
        return f"json_parser({self.output_type!r})"


@overload
def json_parser(output_type: type[T], *, instructions: str | None = None) -> JSONParser[T]: ...
@overload
def json_parser(output_type: Any, *, instructions: str | None = None) -> JSONParser[Any]: ...
def json_parser(output_type: Any, *, instructions: str | None = None) -> JSONParser[Any]:
    """A parser turning a reply into a validated ``output_type`` (a pydantic model or type).

    Example:
        ``SubAgent(name="extractor", prompt=..., output=json_parser(Invoice))``, or
        ``think_with_retry(llm, "...", json_parser(list[int]))``.

    Args:
        output_type: Anything pydantic's ``TypeAdapter`` accepts: a model, a dataclass,
            ``list[int]``, a ``TypedDict``...
        instructions: Replaces the generated output instructions (which show the schema).

    Raises:
        ConfigurationError: ``output_type`` cannot be validated or has no JSON schema.
    """
    return JSONParser(output_type, instructions=instructions)
