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
    OutputContract,
    build_contract,
)
from subagent.parsers._json import (
    JSONParser,
    format_validation_errors,
    json_parser,
)
from subagent.parsers._result import (
    OutputParser,
    ParseResult,
)
from subagent.parsers._sections import (
    SectionsParser,
    multi_section_parser,
    sections_parser,
)
from subagent.parsers._validation import (
    Validation,
    Validator,
)

__all__ = [
    "JSONParser",
    "OutputContract",
    "OutputParser",
    "ParseResult",
    "SectionsParser",
    "Validation",
    "Validator",
    "build_contract",
    "format_validation_errors",
    "json_parser",
    "multi_section_parser",
    "sections_parser",
]
