"""Output contracts: how a return attempt's text becomes a value, or feedback.

Three routes, chosen from ``SubAgent(output=...)``:

* ``None`` or ``str``: the reply's text is the output.
* a pydantic model or any type pydantic can validate: JSON is extracted tolerantly from the
  reply, then validated; failures become per-field feedback.
* a parser callable ``(text, **kwargs) -> ParseResult`` (or its dict form).

Whatever the route, a reply longer than ``max_reply_chars`` (default
:data:`DEFAULT_MAX_REPLY_CHARS`) gets feedback (``reply_too_long``) without being scanned,
and an output holding NaN or an infinity is refused with feedback
(``non_finite_output``): JSON has no such numbers, so the run's :class:`~subagent.Step` could
not be stored and loaded back. A pydantic model whose config sets ``ser_json_inf_nan`` to
``"constants"`` or ``"strings"`` stores them faithfully, and keeps them.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from subagent._checks import check_int
from subagent._errors import ConfigurationError, ParserContractError
from subagent._templates import TemplateSet
from subagent._text import first_non_finite
from subagent.parsers._json import JSONParser
from subagent.parsers._json_extract import iter_json_candidates
from subagent.parsers._result import ParseResult, coerce_parse_result

__all__ = [
    "DEFAULT_MAX_REPLY_CHARS",
    "OutputContract",
    "build_contract",
    "detect_explicit_fail",
    "fail_beside_other_json",
]

DEFAULT_MAX_REPLY_CHARS: Final = 1_000_000
"""The longest reply parsed by default, in characters.

Twice the longest reply a chat model writes (a 128k-token answer is about 500,000
characters of English). Scanning a reply for JSON costs about 0.5 s of CPU per million
characters in the worst case (a reply of ``{``), spent on the event loop; a longer reply is
not scanned at all.
"""


class OutputContract:
    """Turns a return attempt's text into a :class:`ParseResult`.

    Subclasses implement :meth:`_parse`; :meth:`parse` adds the checks every route shares.
    """

    #: The type the output validates to, for typing and the JSON response format.
    output_type: Any = str
    #: Replies longer than this (characters) get feedback without being parsed.
    max_reply_chars: int | None = DEFAULT_MAX_REPLY_CHARS
    #: Whether an output can hold a float at all (else it is not searched for NaN).
    may_hold_floats: bool = True

    @property
    def json_schema(self) -> dict[str, Any] | None:
        """The output's JSON schema, when the contract reads JSON of one (else ``None``).

        What a structured-output request sends the provider as the answer's grammar.
        """
        return None

    def instructions(self, templates: TemplateSet) -> str:
        """What the system prompt says about the expected output (the whole reply)."""
        raise NotImplementedError

    def identity(self, templates: TemplateSet) -> str:
        """What a resumed run's agent must say of the output as the saving one did.

        The instructions, less what only helps the model read them (a schema's shape):
        a paused run saved before that help was added resumes after.
        """
        return self.instructions(templates)

    def answer_format(self, templates: TemplateSet) -> str:
        """What the answer itself must be, for protocols that frame it (``Final Answer:``)."""
        return templates.render("answer_text")

    def parse(self, text: str, templates: TemplateSet) -> ParseResult:
        """Parse ``text``; an error result carries feedback for the model.

        A reply longer than :attr:`max_reply_chars` is an error (``reply_too_long``), and
        so is a parsed value holding NaN or an infinity (``non_finite_output``).
        """
        limit = self.max_reply_chars
        if limit is not None and len(text) > limit:
            return ParseResult.error(
                templates.render("reply_too_long", length=f"{len(text):,}", limit=f"{limit:,}"),
                summary=f"reply too long ({len(text):,} characters)",
            )
        result = self._parse(text, templates)
        if result.ok and self.may_hold_floats:
            location = first_non_finite(result.value)
            if location is not None:
                return ParseResult.error(
                    templates.render("non_finite_output", location=location),
                    summary=f"non-finite number at {location}",
                )
        return result

    def _parse(self, text: str, templates: TemplateSet) -> ParseResult:
        raise NotImplementedError


class TextContract(OutputContract):
    """The reply's text is the output."""

    may_hold_floats = False

    def instructions(self, templates: TemplateSet) -> str:
        return templates.render("output_text")

    def _parse(self, text: str, templates: TemplateSet) -> ParseResult:
        return ParseResult.success(text.strip())


class SchemaContract(OutputContract):
    """JSON extracted from the reply and validated by pydantic (a :func:`json_parser`)."""

    def __init__(self, output_type: Any):
        try:
            self._parser: JSONParser[Any] = JSONParser(output_type)
        except ConfigurationError as exc:
            raise ConfigurationError("output", exc.message) from exc
        self.output_type = output_type
        self.may_hold_floats = _may_hold_floats(self._parser.schema)

    @property
    def json_schema(self) -> dict[str, Any] | None:
        return self._parser.schema

    def instructions(self, templates: TemplateSet) -> str:
        parser = self._parser
        return templates.render("output_json", schema=parser.schema_text, example=parser.example)

    def identity(self, templates: TemplateSet) -> str:
        return templates.render("output_json", schema=self._parser.schema_text, example=None)

    def answer_format(self, templates: TemplateSet) -> str:
        return templates.render("answer_json", schema=self._parser.schema_text)

    def _parse(self, text: str, templates: TemplateSet) -> ParseResult:
        return self._parser(text, templates=templates)


@dataclass(eq=False)
class ParserContract(OutputContract):
    """A user parser following the think-with-retry contract."""

    parser: Callable[..., Any]
    kwargs: Mapping[str, Any]
    output_type: Any = Any
    _takes_templates: bool = field(init=False, repr=False)

    def __post_init__(self) -> None:
        try:
            parameters = inspect.signature(self.parser).parameters
        except (TypeError, ValueError):
            parameters = {}  # type: ignore[assignment]
        self._takes_templates = "templates" in parameters and "templates" not in self.kwargs

    @property
    def json_schema(self) -> dict[str, Any] | None:
        # A JSON parser given as a parser (json_parser(Model)) still reads JSON of a schema.
        schema = getattr(self.parser, "schema", None)
        return schema if isinstance(self.parser, JSONParser) and isinstance(schema, dict) else None

    @property
    def name(self) -> str:
        """The parser's name, for error messages."""
        return getattr(self.parser, "__name__", type(self.parser).__name__)

    def instructions(self, templates: TemplateSet) -> str:
        text = getattr(self.parser, "instructions", None)
        return text if isinstance(text, str) else templates.render("output_text")

    def answer_format(self, templates: TemplateSet) -> str:
        text = getattr(self.parser, "instructions", None)
        return text if isinstance(text, str) else templates.render("answer_text")

    def _parse(self, text: str, templates: TemplateSet) -> ParseResult:
        try:
            if self._takes_templates:  # our parsers render feedback with the agent's templates
                result = self.parser(text, templates=templates, **self.kwargs)
            else:
                result = self.parser(text, **self.kwargs)
        except Exception as exc:
            raise ParserContractError(
                f"parser {self.name!r} raised {type(exc).__name__}: {exc} "
                f"(a parser must return ParseResult.error(feedback) for bad replies)"
            ) from exc
        return coerce_parse_result(result, self.name)


def build_contract(
    output: Any,
    parser_kwargs: Mapping[str, Any] | None,
    *,
    max_reply_chars: int | None = DEFAULT_MAX_REPLY_CHARS,
) -> OutputContract:
    """The contract for ``SubAgent(output=...)``.

    Args:
        output: A type, ``None``/``str``, or a parser.
        parser_kwargs: Keyword arguments for a parser.
        max_reply_chars: Replies longer than this get feedback without being parsed;
            ``None``: no limit.

    Raises:
        ConfigurationError: An argument is invalid; the message names the field.
    """
    if max_reply_chars is not None:
        check_int("max_reply_chars", max_reply_chars, 1)
    contract: OutputContract
    if output is None or output is str:
        if parser_kwargs:
            raise ConfigurationError("parser_kwargs", "is only used with a parser output")
        contract = TextContract()
    elif not _is_parser(output):
        if parser_kwargs:
            raise ConfigurationError("parser_kwargs", "is only used with a parser output")
        contract = SchemaContract(output)
    else:
        contract = ParserContract(output, dict(parser_kwargs or {}))
    contract.max_reply_chars = max_reply_chars
    return contract


def _is_parser(output: Any) -> bool:
    # Type forms such as list[int] or int | None are callable too; they are schemas.
    if inspect.isclass(output) or not callable(output):
        return False
    return typing.get_origin(output) is None and not isinstance(output, types.UnionType)


def detect_explicit_fail(
    text: str, *, max_chars: int | None = DEFAULT_MAX_REPLY_CHARS
) -> str | None:
    """The model's reason if ``text`` is the explicit fail ``{"fail": "<reason>"}``.

    The fail object must be the reply's only JSON (prose around it is allowed): a reply
    that also holds other JSON (an answer, a tool call) is a muddled answer to correct, not
    a decision to give up. A reply longer than ``max_chars`` is not scanned (``None``).
    """
    if '"fail"' not in text or (max_chars is not None and len(text) > max_chars):
        return None
    found: list[Any] = []
    for candidate in iter_json_candidates(text):
        if candidate.ok and candidate.value not in found:
            found.append(candidate.value)
            if len(found) > 1:
                return None
    value = found[0] if found else None
    if isinstance(value, dict) and len(value) == 1:
        reason = value.get("fail")
        if isinstance(reason, str):
            return reason or "(no reason given)"
    return None


def fail_beside_other_json(text: str, *, max_chars: int | None = DEFAULT_MAX_REPLY_CHARS) -> bool:
    """Whether ``text`` holds the explicit fail object beside other JSON (a muddled reply).

    Neither an answer nor a decision to give up: it is corrected like any invalid answer.
    """
    if '"fail"' not in text or (max_chars is not None and len(text) > max_chars):
        return False
    values = [candidate.value for candidate in iter_json_candidates(text) if candidate.ok]
    fails = [v for v in values if isinstance(v, dict) and len(v) == 1 and "fail" in v]
    return bool(fails) and len(values) > len(fails)


_COMPOSED = ("anyOf", "oneOf", "allOf", "$ref", "enum", "const")


def _may_hold_floats(schema: Mapping[str, Any]) -> bool:
    """Whether a value valid for ``schema`` can contain a float (so possibly NaN).

    ``False`` only when every part of the schema is typed and none is a ``number``: such
    outputs are not searched for NaN or infinities after each parse.
    """
    definitions = schema.get("$defs", {})
    seen: set[str] = set()

    def walk(node: object) -> bool:
        if not isinstance(node, Mapping):
            return True
        kinds = node.get("type")
        if kinds is None and not any(key in node for key in _COMPOSED):
            return True  # untyped: anything, a float included
        if kinds == "number" or (isinstance(kinds, list) and "number" in kinds):
            return True
        reference = node.get("$ref")
        if isinstance(reference, str):
            name = reference.rsplit("/", 1)[-1]
            if name not in seen:
                seen.add(name)
                if walk(definitions.get(name)):
                    return True
        children: list[object] = []
        for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
            children.extend(node.get(key, []))
        for key in ("items", "additionalProperties"):
            child = node.get(key)
            if isinstance(child, Mapping):
                children.append(child)
            elif child is True:
                return True
        children.extend(node.get("properties", {}).values())
        if kinds == "object" and "properties" not in node and "additionalProperties" not in node:
            return True  # a free-form object
        return any(walk(child) for child in children)

    return walk(schema)
