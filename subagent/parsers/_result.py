"""The parser contract: a reply becomes data, or specific feedback for a correction turn."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol

from typing_extensions import TypeVar

from subagent._errors import ParserContractError

__all__ = ["OutputParser", "ParseResult", "coerce_parse_result"]

# What a parser's data is, for type checkers: Any unless its parser says (ParseResult[int]).
DataT = TypeVar("DataT", covariant=True, default=Any)


@dataclass(frozen=True, slots=True)
class ParseResult(Generic[DataT]):
    """What a parser made of a reply.

    Build one with :meth:`success` or :meth:`error`.

    Attributes:
        ok: Whether the reply parsed.
        data: The parsed value (single-value parsers).
        sections: The parsed sections (multi-section parsers).
        feedback: On error: what is missing or malformed, and how to fix it.
        summary: On error: what was wrong without any text of the reply (field names,
            error types, positions), safe for traces and logs; empty when the parser gives
            none.
    """

    ok: bool
    data: DataT | None = None
    sections: Mapping[str, str] | None = None
    feedback: str = ""
    summary: str = ""

    @classmethod
    def success(cls, data: Any = None, *, sections: Mapping[str, str] | None = None) -> ParseResult:
        """A successful parse carrying ``data`` or ``sections``."""
        return cls(True, data, sections)

    @classmethod
    def error(cls, feedback: str, *, summary: str = "") -> ParseResult:
        """A failed parse; ``feedback`` is shown to the model on the next turn.

        ``summary``: the same without any text of the reply (see :attr:`summary`).
        """
        if not feedback:
            raise ValueError("ParseResult.error needs non-empty feedback for the model")
        return cls(False, feedback=feedback, summary=summary)

    @property
    def value(self) -> Any:
        """The parsed output: ``sections`` when set, else ``data``."""
        return self.sections if self.sections is not None else self.data


def coerce_parse_result(result: object, parser_name: str) -> ParseResult:
    """Accept a :class:`ParseResult` or its dict form; reject anything else.

    Raises:
        ParserContractError: ``result`` is neither, naming the parser and what it returned.
    """
    if isinstance(result, ParseResult):
        return result
    if isinstance(result, Mapping):
        status = result.get("status")
        if status == "success":
            sections = result.get("sections")
            if sections is not None and not isinstance(sections, Mapping):
                raise ParserContractError(
                    f"parser {parser_name!r} returned 'sections' of type "
                    f"{type(sections).__name__}; expected a mapping"
                )
            return ParseResult.success(result.get("data"), sections=sections)
        if status == "error":
            feedback = result.get("feedback")
            if not isinstance(feedback, str) or not feedback:
                raise ParserContractError(
                    f"parser {parser_name!r} returned status 'error' without a non-empty "
                    f"'feedback' string"
                )
            return ParseResult.error(feedback)
        raise ParserContractError(
            f"parser {parser_name!r} returned a dict with status {status!r}; "
            f"expected 'success' or 'error'"
        )
    raise ParserContractError(
        f"parser {parser_name!r} returned {type(result).__name__}; expected a ParseResult "
        f"or a dict with 'status' 'success'/'error'"
    )


class OutputParser(Protocol[DataT]):
    """A parser for ``SubAgent(output=...)``: ``(text, **kwargs) -> ParseResult``.

    The dict form (``{"status": "success", "data": ...}`` or ``{"status": "error",
    "feedback": ...}``) is accepted too. A model class does not fit this shape (calling it
    builds an instance), which lets type checkers tell ``output=Model`` (typed
    ``SubAgent[Model]``) from ``output=parser``: an agent with a parser is typed by what
    the parser says it returns (``SubAgent[Any]`` for ``-> ParseResult``,
    ``SubAgent[int]`` for ``-> ParseResult[int]``).
    """

    def __call__(
        self, text: str, /, *args: Any, **kwargs: Any
    ) -> ParseResult[DataT] | Mapping[str, DataT]: ...
