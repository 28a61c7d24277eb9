r"""Section parsing: a reply organised under header lines becomes a dict of sections.

The model writes naturally under soft hints ("put each header on its own line"); this module
parses strictly and, when something is missing, says exactly what and how to fix it.

Header-matching rules (non-regex mode). A line is the header ``H`` when, after stripping
surrounding whitespace:

1. it equals ``H`` (stripped), or
2. it is *decorated* -- a Markdown heading (``#`` marks followed by a space, optionally
   closed by ``#`` marks) and/or wrapped in emphasis (``*``, ``**``, ``***``, ``_``, ``__``
   and mixes such as ``**_``) -- and the text inside the decoration equals ``H``, or equals
   ``H`` without its brackets when ``H`` is bracketed (``[Plan]`` matches ``**[Plan]**``,
   ``## Plan`` and ``**Plan**``).

A bare ``Plan`` line does *not* match ``[Plan]``: without brackets or decoration it is as
likely to be content as a heading. Matching is case-sensitive. Section keys are always the
headers exactly as given. A section's content is everything after its header line up to the
next header line (of any of the headers), stripped of surrounding whitespace; it may be
empty. When a header occurs more than once, the last occurrence wins. ``\r\n`` and ``\r``
line endings are read as ``\n``. Text before the first header is ignored.

All of it is one pass over the lines: linear in the reply's length.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from subagent._errors import ConfigurationError
from subagent._templates import TemplateSet, default_templates
from subagent.parsers._result import ParseResult

__all__ = ["MatchMode", "SectionsParser", "multi_section_parser", "sections_parser"]

MatchMode = Literal["ALL", "ANY"]
_MATCH_MODES = ("ALL", "ANY")
_DECORATION_START = frozenset("#*_")
_INLINE_CHECKS = 10


def multi_section_parser(
    text: str,
    section_headers: Sequence[str] | None = None,
    regex_mode: bool = False,
    match_mode: MatchMode = "ALL",
    *,
    templates: TemplateSet | None = None,
) -> ParseResult:
    """Parse a reply into sections, or into the content between two ``=====`` dividers.

    With ``section_headers``, each header starts a section (see the module docstring for how
    lines are matched to headers). ``match_mode="ALL"`` requires every header; the feedback
    names each missing one and shows the expected header line. ``"ANY"`` requires at least
    one. Success carries ``sections``: the found headers (as given, in the given order)
    mapped to their content.

    Without headers (single-section mode), the reply's answer is the text between its last
    two divider lines (lines of five or more ``=``); success carries it as ``data``. An
    empty answer between the dividers is an error.

    Args:
        text: The model's reply.
        section_headers: The headers, e.g. ``["[Plan]", "[Timeline]"]``; regular expressions
            in ``regex_mode``.
        regex_mode: Treat headers as patterns matched against the whole stripped line (or
            the text inside a Markdown decoration). Sections are keyed by the pattern.
        match_mode: ``"ALL"`` or ``"ANY"``.
        templates: The prompt templates to render feedback with (default: the shipped ones).

    Returns:
        A :class:`ParseResult`; never raises for any reply text.

    Raises:
        ConfigurationError: (a ``ValueError``) the arguments are invalid: an empty header
            list, a blank header, a bad ``match_mode``, an invalid regular expression.
    """
    if section_headers is None:
        _check_match_mode(match_mode)
        return _parse_divided(text, templates or default_templates())
    return _HeaderSpec.build(section_headers, regex_mode, match_mode, "section_headers").parse(
        text, templates or default_templates()
    )


class SectionsParser:
    """A reusable sections parser for ``SubAgent(output=...)`` and ``think_with_retry``.

    Built by :func:`sections_parser`; the arguments are checked once, at construction.

    Attributes:
        headers: The section headers (or patterns), as given, duplicates removed.
        match_mode: ``"ALL"`` or ``"ANY"``.
        regex_mode: Whether headers are regular expressions.
        instructions: The output instructions the runtime adds to the system prompt.
    """

    __name__ = "sections_parser"

    def __init__(
        self,
        headers: Sequence[str],
        *,
        match_mode: MatchMode = "ALL",
        regex_mode: bool = False,
        instructions: str | None = None,
    ):
        self._spec = _HeaderSpec.build(headers, regex_mode, match_mode, "headers")
        self.headers: tuple[str, ...] = self._spec.headers
        self.match_mode: MatchMode = match_mode
        self.regex_mode = regex_mode
        if instructions is None:
            instructions = (
                default_templates()
                .render(
                    "sections_instructions",
                    headers=", ".join(self.headers),
                    any=match_mode == "ANY",
                    regex=regex_mode,
                )
                .strip()
            )
        self.instructions = instructions

    def __call__(self, text: str, *, templates: TemplateSet | None = None) -> ParseResult:
        """Parse ``text``; see :func:`multi_section_parser`."""
        return self._spec.parse(text, templates or default_templates())

    def __repr__(self) -> str:
        return (
            f"sections_parser({list(self.headers)!r}, match_mode={self.match_mode!r}, "
            f"regex_mode={self.regex_mode!r})"
        )


def sections_parser(
    headers: Sequence[str],
    *,
    match_mode: MatchMode = "ALL",
    regex_mode: bool = False,
    instructions: str | None = None,
) -> SectionsParser:
    """A parser for replies organised under ``headers``, with matching output instructions.

    Example:
        ``SubAgent(name="planner", prompt=..., output=sections_parser(["[Plan]",
        "[Timeline]"]))`` -- the system prompt then asks for those sections, and a reply that
        misses one gets feedback naming it.

    Args:
        headers: The section headers, e.g. ``["[Plan]", "[Timeline]"]``.
        match_mode: ``"ALL"`` (every section required) or ``"ANY"`` (at least one).
        regex_mode: Treat headers as regular expressions.
        instructions: Replaces the generated output instructions (useful in regex mode,
            where the patterns make poor instructions).

    Raises:
        ConfigurationError: (a ``ValueError``) the arguments are invalid.
    """
    return SectionsParser(
        headers, match_mode=match_mode, regex_mode=regex_mode, instructions=instructions
    )


def _check_match_mode(match_mode: object) -> None:
    if match_mode not in _MATCH_MODES:
        raise ConfigurationError("match_mode", f"must be 'ALL' or 'ANY', got {match_mode!r}")


def _lines(text: str) -> list[str]:
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def _undecorate(stripped: str) -> str | None:
    """The text inside a Markdown heading/emphasis decoration, or None if undecorated."""
    text = stripped
    decorated = False
    if text.startswith("#"):
        body = text.lstrip("#")
        if body and not body[0].isspace():
            return None  # "#tag" is not a heading
        body = body.strip()
        unclosed = body.rstrip("#")
        if unclosed != body and (not unclosed or unclosed[-1].isspace()):
            body = unclosed.rstrip()
        text, decorated = body, True
    lead = len(text) - len(text.lstrip("*_"))
    if lead:
        trail = len(text) - len(text.rstrip("*_"))
        if (
            lead == trail
            and lead <= 3
            and len(text) > 2 * lead
            and text[:lead] == text[-lead:][::-1]
        ):
            text, decorated = text[lead:-lead].strip(), True
    return text if decorated else None


def _header_label(header: str, regex_mode: bool) -> str:
    return f"a line matching the regular expression {header}" if regex_mode else header.strip()


@dataclass(frozen=True, slots=True)
class _HeaderSpec:
    """Validated headers and the lookup tables that match a line to a header."""

    headers: tuple[str, ...]
    regex_mode: bool
    match_any: bool
    exact: dict[str, str]
    bare: dict[str, str]
    patterns: tuple[tuple[re.Pattern[str], str], ...]

    @classmethod
    def build(
        cls, headers: object, regex_mode: bool, match_mode: object, field: str
    ) -> _HeaderSpec:
        """Check the arguments; errors name the caller's argument ``field``."""
        _check_match_mode(match_mode)
        if isinstance(headers, str | bytes) or not isinstance(headers, Sequence):
            raise ConfigurationError(
                field,
                f"must be a list of header strings, got {type(headers).__name__}",
            )
        if not headers:
            raise ConfigurationError(field, "must name at least one header")
        for header in headers:
            if not isinstance(header, str) or not header.strip():
                raise ConfigurationError(
                    field, f"each header must be a non-blank string, got {header!r}"
                )
            if "\n" in header or "\r" in header:
                raise ConfigurationError(field, f"a header must fit on one line, got {header!r}")
        unique: tuple[str, ...] = tuple(dict.fromkeys(headers))
        exact: dict[str, str] = {}
        bare: dict[str, str] = {}
        patterns: list[tuple[re.Pattern[str], str]] = []
        for header in unique:
            if regex_mode:
                try:
                    patterns.append((re.compile(header.strip()), header))
                except re.error as exc:
                    raise ConfigurationError(
                        field, f"invalid regular expression {header!r}: {exc}"
                    ) from exc
                continue
            key = header.strip()
            exact.setdefault(key, header)
            if len(key) > 2 and key[0] == "[" and key[-1] == "]":
                bare.setdefault(key[1:-1].strip(), header)
        return cls(unique, regex_mode, match_mode == "ANY", exact, bare, tuple(patterns))

    def match(self, line: str) -> str | None:
        """The header that ``line`` is, or None."""
        stripped = line.strip()
        if not stripped:
            return None
        if self.regex_mode:
            inner = _undecorate(stripped) if stripped[0] in _DECORATION_START else None
            for pattern, name in self.patterns:
                if pattern.fullmatch(stripped) or (inner is not None and pattern.fullmatch(inner)):
                    return name
            return None
        found = self.exact.get(stripped)
        if found is not None or stripped[0] not in _DECORATION_START:
            return found
        inner = _undecorate(stripped)
        if inner is None:
            return None
        return self.exact.get(inner) or self.bare.get(inner)

    def parse(self, text: str, templates: TemplateSet) -> ParseResult:
        """Parse ``text`` into sections (one pass over its lines)."""
        lines = _lines(text)
        spans: dict[str, tuple[int, int]] = {}
        current: str | None = None
        start = 0
        match = self.match
        for index, line in enumerate(lines):
            header = match(line)
            if header is None:
                continue
            if current is not None:
                spans[current] = (start, index)
            current, start = header, index + 1
        if current is not None:
            spans[current] = (start, len(lines))
        sections = {
            header: "\n".join(lines[spans[header][0] : spans[header][1]]).strip()
            for header in self.headers
            if header in spans
        }
        if self.match_any:
            if sections:
                return ParseResult.success(sections=sections)
            return ParseResult.error(self._none_found(templates), summary="no section found")
        if len(sections) == len(self.headers):
            return ParseResult.success(sections=sections)
        missing = len(self.headers) - len(sections)
        # Headers are the agent's own text, not the reply's: safe to name in a summary.
        names = ", ".join(h for h in self.headers if h not in sections)
        return ParseResult.error(self._missing(text, sections, templates),
                                 summary=f"{missing} missing section(s): {names}")  # fmt: skip

    def _missing(self, text: str, found: dict[str, str], templates: TemplateSet) -> str:
        missing = [header for header in self.headers if header not in found]
        # Each "written inside a line" check scans the reply; bounding their number keeps
        # the feedback linear in the reply's length however many headers are missing.
        checked = set() if self.regex_mode else set(missing[:_INLINE_CHECKS])
        items = [
            {
                "header": _header_label(header, self.regex_mode),
                "inline": header in checked and header.strip() in text,
            }
            for header in missing
        ]
        example = (
            ""
            if self.regex_mode
            else "\n".join(f"{header.strip()}\n..." for header in self.headers)
        )
        return templates.render(
            "sections_missing", missing=items, count=len(items), example=example
        ).strip()

    def _none_found(self, templates: TemplateSet) -> str:
        labels = [{"header": _header_label(h, self.regex_mode)} for h in self.headers]
        return templates.render("sections_none_found", headers=labels).strip()


def _is_divider(line: str) -> bool:
    stripped = line.strip()
    return len(stripped) >= 5 and not stripped.strip("=")


def _parse_divided(text: str, templates: TemplateSet) -> ParseResult:
    """Single-section mode: the content between the last two divider lines."""
    lines = _lines(text)
    last = previous = -1
    for index, line in enumerate(lines):
        if "=====" in line and _is_divider(line):
            previous, last = last, index
    if previous < 0:
        return ParseResult.error(templates.render("divider_missing", found_one=last >= 0).strip(),
                                 summary="divider missing")  # fmt: skip
    content = "\n".join(lines[previous + 1 : last]).strip()
    if not content:
        return ParseResult.error(templates.render("divider_empty").strip(),
                                 summary="empty between the dividers")  # fmt: skip
    return ParseResult.success(content)
