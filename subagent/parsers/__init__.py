"""The parsers room: how a reply's text becomes a value, or feedback for a correction turn.

What lives here:

- ``_result``: :class:`ParseResult`, the parser contract (success data, or specific
  feedback), and :class:`OutputParser`, the shape of a parser.
- ``_json_extract``: tolerant JSON extraction (fenced, after prose, repaired).
- ``_json``: :func:`json_parser`, JSON validated by pydantic, per-field feedback.
- ``_sections``: :func:`sections_parser` / :func:`multi_section_parser` for headed sections.
- ``_validation``: :class:`Validation` and validators run on a parsed output.
- ``_contract``: the output contract of an agent (``SubAgent(output=...)``), and the
  explicit-fail form ``{"fail": "<reason>"}``.

What it may import: the base modules only (``subagent._errors``, ``subagent._checks``,
``subagent._templates``, ``subagent._text``). It knows nothing of models, turns or phases.
"""

from subagent.parsers._contract import (
    DEFAULT_MAX_REPLY_CHARS,
    OutputContract,
    build_contract,
    detect_explicit_fail,
    fail_beside_other_json,
)
from subagent.parsers._json import (
    JSONParser,
    format_validation_errors,
    json_parser,
    schema_names,
    validation_summary,
)
from subagent.parsers._json_extract import JSONExtraction, extract_json, iter_json_candidates
from subagent.parsers._result import OutputParser, ParseResult, coerce_parse_result
from subagent.parsers._sections import (
    MatchMode,
    SectionsParser,
    multi_section_parser,
    sections_parser,
)
from subagent.parsers._validation import (
    Validation,
    Validator,
    callable_name,
    coerce_validation,
    run_validators,
)

__all__ = [
    "DEFAULT_MAX_REPLY_CHARS",
    "JSONExtraction",
    "JSONParser",
    "MatchMode",
    "OutputContract",
    "OutputParser",
    "ParseResult",
    "SectionsParser",
    "Validation",
    "Validator",
    "build_contract",
    "callable_name",
    "coerce_parse_result",
    "coerce_validation",
    "detect_explicit_fail",
    "extract_json",
    "fail_beside_other_json",
    "format_validation_errors",
    "iter_json_candidates",
    "json_parser",
    "multi_section_parser",
    "run_validators",
    "schema_names",
    "sections_parser",
    "validation_summary",
]
