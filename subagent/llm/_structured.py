"""Output modes on the wire: structured-output fields, strict schemas, the forced answer tool.

How an :class:`~subagent.llm.OutputRequest` becomes fields of a chat-completions body in a
server's dialect (:func:`output_fields`, :func:`answer_tool`), how a schema is made to meet
OpenAI's strict rules (:func:`strict_schema`), and how a forced answer tool's call becomes
the reply's text again (:func:`answer_from_tool`), and a request sent without its mode
(:func:`as_text`). No I/O happens here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from subagent.llm._profile import StructuredOutput
from subagent.llm._protocol import LLMRequest, LLMResponse, OutputRequest, StopReason

__all__ = [
    "STRUCTURED_FIELDS",
    "answer_from_tool",
    "answer_tool",
    "as_text",
    "output_fields",
    "strict_schema",
]

STRUCTURED_FIELDS: Final = ("response_format", "guided_json", "structured_outputs")
"""Body fields that ask for structured output in one dialect or another: an output mode
``json_schema`` replaces any of them the settings hold (two would conflict)."""

# OpenAI's strict mode (its "Supported schemas"): what a schema may say, beyond annotations.
_STRICT_KEYWORDS: Final = frozenset({
    "type", "properties", "required", "additionalProperties", "items", "anyOf", "enum",
    "const", "$ref", "$defs", "definitions", "pattern", "format", "minimum", "maximum",
    "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minItems", "maxItems",
})  # fmt: skip
_KEPT_NOTES: Final = frozenset({"title", "description"})
# Annotations strict mode refuses and nothing validates: dropped, never a reason to give up.
_DROPPED_NOTES: Final = frozenset(
    {"default", "examples", "$comment", "$schema", "deprecated", "readOnly", "writeOnly"}
)
_STRICT_FORMATS: Final = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}
)
_MAX_STRICT_DEPTH: Final = 64  # a deeper schema is sent with strict: false, never walked on


def strict_schema(schema: Mapping[str, Any]) -> dict[str, Any] | None:
    """``schema`` made to meet OpenAI's strict rules by narrowing it; ``None`` if it cannot be.

    Every object gets ``additionalProperties: false`` and lists all its properties as
    required; ``default`` and other annotations that constrain nothing are dropped, and a
    ``$ref`` with a description beside it is wrapped in ``anyOf``. Whatever the result
    accepts, ``schema`` accepts too, so an answer that follows it is still valid.

    Not made strict (``None``): a root that is not an object; an object open to any keys (no
    ``properties``, or ``additionalProperties`` other than ``false``); an array without a
    typed ``items``; keywords strict mode lacks (``oneOf``, ``allOf``, ``not``,
    ``minLength``, ``prefixItems``...) or a string ``format`` it lacks; nesting past 64 levels.
    """
    if schema.get("type") != "object":
        return None
    return _strict(schema, 0)


def _strict(node: object, depth: int) -> dict[str, Any] | None:
    if not isinstance(node, Mapping) or depth > _MAX_STRICT_DEPTH:
        return None
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED_NOTES:
            continue
        if key not in _STRICT_KEYWORDS and key not in _KEPT_NOTES:
            return None
        out[key] = value
    if "format" in out and out["format"] not in _STRICT_FORMATS:
        return None
    if "$ref" in out:
        if set(out) - _KEPT_NOTES - {"$ref"}:
            return None
        if len(out) > 1:  # strict mode takes no siblings beside $ref, but takes them by anyOf
            notes = {key: out[key] for key in out if key != "$ref"}
            return {"anyOf": [{"$ref": out["$ref"]}], **notes}
        return out
    for key in ("$defs", "definitions"):
        if key in out:
            if not isinstance(out[key], Mapping):
                return None
            definitions = {name: _strict(sub, depth + 1) for name, sub in out[key].items()}
            if any(sub is None for sub in definitions.values()):
                return None
            out[key] = definitions
    if "anyOf" in out:
        if not isinstance(out["anyOf"], list) or not out["anyOf"]:
            return None
        choices = [_strict(choice, depth + 1) for choice in out["anyOf"]]
        if any(choice is None for choice in choices):
            return None
        out["anyOf"] = choices
    types = out.get("type")
    kinds = set(types) if isinstance(types, list) else {types}
    if "object" in kinds or "properties" in out:
        properties = out.get("properties")
        if not isinstance(properties, Mapping) or out.get("additionalProperties", False):
            return None  # open to any keys: no narrowing would keep its meaning
        strict_properties = {name: _strict(sub, depth + 1) for name, sub in properties.items()}
        if any(sub is None for sub in strict_properties.values()):
            return None
        out["properties"] = strict_properties
        out["required"] = list(strict_properties)
        out["additionalProperties"] = False
    if "array" in kinds or "items" in out:
        items = _strict(out.get("items"), depth + 1)
        if items is None:
            return None
        out["items"] = items
    return out


def _schema_for(output: OutputRequest) -> tuple[dict[str, Any], bool]:
    """The schema to send and whether to send it as strict."""
    schema = output.json_schema or {}
    if output.strict:
        strict = strict_schema(schema)
        if strict is not None:
            return strict, True
    return schema, False


def output_fields(output: OutputRequest, dialect: StructuredOutput) -> dict[str, Any]:
    """The body fields that ask for output mode ``json_schema`` in ``dialect``."""
    if dialect == "json_schema":
        schema, strict = _schema_for(output)
        return {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": output.name, "schema": schema, "strict": strict},
            }
        }
    schema = output.json_schema or {}
    if dialect == "json_object":
        return {"response_format": {"type": "json_object", "schema": schema}}
    if dialect == "guided_json":
        return {"guided_json": schema}
    return {"structured_outputs": {"json": schema}}


def answer_tool(output: OutputRequest) -> tuple[dict[str, Any], dict[str, Any]]:
    """The forced answer tool of output mode ``tool``: its definition and the tool choice.

    The definition carries ``strict: true`` (and the strict schema) when the schema can be
    made strict and the request asks for it.
    """
    schema, strict = _schema_for(output)
    function: dict[str, Any] = {
        "name": output.name,
        "description": output.description or "Give your final answer.",
        "parameters": schema,
    }
    if strict:
        function["strict"] = True
    choice = {"type": "function", "function": {"name": output.name}}
    return {"type": "function", "function": function}, choice


def answer_from_tool(response: LLMResponse, output: OutputRequest) -> LLMResponse:
    """A reply to output mode ``tool``: its one call of the answer tool, as the reply's text.

    The call's arguments become the text (JSON); any text the model wrote beside the call
    is dropped (it is not the answer). A reply without that call, or with other calls
    besides it, is returned unchanged: the server did not follow the forced choice, and the
    reply is judged as it came.
    """
    calls = response.tool_calls
    if len(calls) != 1 or calls[0].name != output.name:
        return response
    arguments = calls[0].arguments
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return response.model_copy(
        update={"text": text, "tool_calls": [], "stop_reason": StopReason.STOP}
    )


def as_text(request: LLMRequest) -> LLMRequest:
    """``request`` without its output mode: the answer asked for in the prompt alone."""
    return request.model_copy(update={"output": None})
