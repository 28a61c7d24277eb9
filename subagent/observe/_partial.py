"""A typed output read from a reply while it streams: what ``AgentRun.stream_output()`` yields.

A :class:`PartialOutputReader` reads a run's events (those of ``agent.stream()``) in the
consumer's task, never in the run's: a run nobody asks this of pays nothing, and the
parsing never holds the model's stream back. It gathers each turn's ``TextDelta`` pieces
and validates the JSON they hold so far with pydantic's partial validation
(``experimental_allow_partial="trailing-strings"``: an object or a list cut short is
closed, a string cut short is kept as far as it goes; an unfinished last element that fails,
inside a model too, is left out), yielding a :class:`PartialOutput` each time what
validates changes. The run's own output, validated in full, comes last.

Work is bounded: the reply so far is parsed again only once it has grown by
:data:`PARSE_EVERY` characters, or by ``1/PARSE_GROWTH`` of its length, whichever is more.
A reply of ``n`` characters is then parsed at most 17 times in its first 512 characters and
about ``16.5 ln(n / 512)`` times after them (125 times for 1,000,000 characters), and all
the parses read at most ``(PARSE_GROWTH + 1) n + PARSE_EVERY * PARSE_GROWTH**2`` characters
in all (``17 n + 8,192``): linear in the reply, where parsing on every piece would be
quadratic. One parse is one validation of the JSON so far; when it fails, one more read and
at most :data:`PRUNED_LEVELS` validations without an unfinished last element: at most
``2 + 2 * PRUNED_LEVELS`` (8) passes over the text. A reply longer than the agent's
``max_reply_chars`` is not parsed (its output contract would refuse it).
"""

from __future__ import annotations

import re
import weakref
from typing import Any, Final, Generic, cast

from pydantic import TypeAdapter
from pydantic_core import from_json, to_json
from typing_extensions import TypeVar

from subagent.observe._events import (
    CallRetried,
    PartialOutput,
    RunEnded,
    RunEvent,
    TextDelta,
    TurnEnded,
    TurnStarted,
)
from subagent.parsers import JSONParser, OutputContract
from subagent.records import TurnOutcome

__all__ = [
    "PARSE_EVERY",
    "PARSE_GROWTH",
    "PRUNED_LEVELS",
    "PartialOutputReader",
    "partial_output_reader",
]

OutputT = TypeVar("OutputT", default=Any)

PARSE_EVERY: Final = 32
"""Characters a turn's reply must grow by before it is parsed again (at least)."""

PARSE_GROWTH: Final = 16
"""A reply is parsed again once it grew by ``1/PARSE_GROWTH`` of its length (if more)."""

PRUNED_LEVELS: Final = 3
"""A text that fails validation is tried again without the unfinished last element of
this many containers on its last path (one at a time, the deepest first)."""

_FINAL_ANSWER = re.compile(r"final answer", re.IGNORECASE)
_FAIL_KEY = re.compile(r'\{\s*"fail"\s*:')
_NOTHING: Any = object()

# One TypeAdapter per contract (an agent's parts hold their contract as long as they live).
_ADAPTERS: weakref.WeakKeyDictionary[OutputContract, TypeAdapter[Any]] = weakref.WeakKeyDictionary()


class PartialOutputReader(Generic[OutputT]):
    """Reads one run's events; :meth:`read` says when the output read so far changed.

    Args:
        agent: The agent's name (the partial outputs carry it).
        adapter: Validates the output type (anything with pydantic's ``validate_json``).
        openers: The characters a JSON answer may begin with (``{``, ``[``); empty: the
            type is a scalar, only the run's final output is reported.
        after_marker: Look for the JSON only after ``Final Answer`` (the ReAct protocol,
            whose replies may hold an action's JSON first).
        max_chars: A reply longer than this is not parsed (``None``: no limit).
        fail_is_a_field: The output type has a ``fail`` field, so an object beginning
            with it is an answer, not the explicit fail ``{"fail": "<reason>"}``.
    """

    __slots__ = (
        "_adapter",
        "_after",
        "_agent",
        "_fail_is_a_field",
        "_index",
        "_json_found",
        "_last",
        "_length",
        "_marker",
        "_max_chars",
        "_openers",
        "_parsed_at",
        "_pieces",
        "_scanned",
        "_stopped",
    )

    def __init__(
        self,
        agent: str,
        adapter: TypeAdapter[OutputT],
        openers: str,
        *,
        after_marker: bool = False,
        max_chars: int | None = None,
        fail_is_a_field: bool = False,
    ):
        self._agent = agent
        self._adapter = adapter
        self._openers = openers
        self._marker = _FINAL_ANSWER if after_marker else None
        self._max_chars = max_chars
        self._fail_is_a_field = fail_is_a_field
        self._start_turn(0)

    def read(self, event: RunEvent) -> PartialOutput[OutputT] | None:
        """What ``event`` changes in the output read so far, or ``None`` if nothing.

        A ``TextDelta`` may bring a partial output (when the reply grew enough to parse it
        again, and what validates changed); a ``TurnEnded`` that is not the answer brings
        the last of its reply; a ``RunEnded`` of a run that is done brings the final output.
        """
        if isinstance(event, TextDelta):
            if event.index != self._index:
                self._start_turn(event.index)
            self._pieces.append(event.text)
            self._length += len(event.text)
            grown = self._length - self._parsed_at
            if grown < PARSE_EVERY or grown < self._parsed_at // PARSE_GROWTH:
                return None
            return self._parse()
        if isinstance(event, TurnStarted | CallRetried):
            self._start_turn(event.index)  # a retried call's reply streams again from its start
        elif isinstance(event, TurnEnded):
            if event.outcome is not TurnOutcome.SUCCESS and self._length > self._parsed_at:
                return self._parse()  # the whole reply (the answer's comes with RunEnded)
        elif isinstance(event, RunEnded) and event.step.ok:
            turns = event.step.turns
            index = turns[-1].index if turns else self._index
            output = cast("OutputT", event.step.output)
            return PartialOutput(self._agent, index, output, final=True)
        return None

    def _start_turn(self, index: int) -> None:
        self._index = index
        self._pieces: list[str] = []
        self._length = 0  # the reply's length so far
        self._parsed_at = 0  # its length when last parsed
        self._json_found = False  # whether the pieces are the JSON only (from its start)
        self._scanned = 0  # how far the reply was searched for where the JSON begins
        self._after = 0  # where the JSON may begin (past "Final Answer", for ReAct)
        self._stopped = False
        self._last: Any = _NOTHING

    def _parse(self) -> PartialOutput[OutputT] | None:
        self._parsed_at = self._length
        if self._stopped:
            return None
        if self._max_chars is not None and self._length > self._max_chars:
            self._stopped, self._pieces = True, []  # the contract will refuse it: let it go
            return None
        text = "".join(self._pieces)
        if not self._json_found:
            start = self._json_start(text)
            if start is None:
                self._pieces = [text]
                return None
            text = text[start:]
            self._json_found = True
            if not self._fail_is_a_field and _FAIL_KEY.match(text):
                self._stopped, self._pieces = True, []  # the explicit fail, not an answer
                return None
        self._pieces = [text]
        output = self._validated(text)
        if output is _NOTHING or (self._last is not _NOTHING and output == self._last):
            return None
        self._last = output
        return PartialOutput(self._agent, self._index, output)

    def _validated(self, text: str) -> Any:
        """The output the JSON so far validates to, else ``_NOTHING``.

        pydantic ignores errors in the last element of a list or a dict, but not inside a
        model (pydantic 2.14): a list of models with its last one half written fails. So a
        text that fails is read, and validated again without the last, unfinished element
        of each container on its last path, the deepest first, up to
        :data:`PRUNED_LEVELS` of them.
        """
        validate = self._adapter.validate_json
        try:
            return validate(text, experimental_allow_partial="trailing-strings")
        except Exception:  # not valid yet, in any way: the validators judge whole answers
            pass
        try:
            data = from_json(text, allow_partial="trailing-strings")
        except ValueError:
            return _NOTHING
        containers: list[dict[str, Any] | list[Any]] = []
        node = data
        while isinstance(node, dict | list) and node:
            containers.append(node)
            node = node[-1] if isinstance(node, list) else node[next(reversed(node))]
        for container in reversed(containers[max(0, len(containers) - PRUNED_LEVELS) :]):
            if isinstance(container, list):
                item = container.pop()
            else:
                key, value = container.popitem()
            try:
                return validate(to_json(data), experimental_allow_partial="trailing-strings")
            except Exception:
                pass
            if isinstance(container, list):
                container.append(item)
            else:
                container[key] = value
        return _NOTHING

    def _json_start(self, text: str) -> int | None:
        """Where the JSON answer begins in the reply so far, if it has begun."""
        begin = max(0, self._scanned - len("final answer"))  # a word cut between pieces
        self._scanned = len(text)
        if self._marker is not None and not self._after:
            found = self._marker.search(text, begin)
            if found is None:
                return None
            self._after = found.end()
        begin = max(begin, self._after)
        found_at = [at for at in (text.find(opener, begin) for opener in self._openers) if at >= 0]
        return min(found_at) if found_at else None


def partial_output_reader(
    agent: str, contract: OutputContract, protocol: str
) -> PartialOutputReader[Any]:
    """The reader of an agent's partial outputs, for its output contract and protocol.

    Raises:
        TypeError: The output is not typed JSON (text, or a parser of its own): nothing
            can be validated before the reply is complete.
    """
    schema = contract.json_schema
    if schema is None:
        raise TypeError(
            "stream_output() needs an output that is JSON of a type pydantic validates "
            "(SubAgent(output=Model)); this agent's output is text or a parser's: read the "
            "run's TextDelta events instead (async for event in run)"
        )
    adapter = _ADAPTERS.get(contract)
    if adapter is None:
        parser = getattr(contract, "parser", None)
        output_type = parser.output_type if isinstance(parser, JSONParser) else contract.output_type
        adapter = _ADAPTERS[contract] = TypeAdapter(output_type)
    kind = schema.get("type")
    openers = {"object": "{", "array": "["}.get(kind, "") if kind else "{["
    properties = schema.get("properties")
    return PartialOutputReader(
        agent,
        adapter,
        openers,
        after_marker=protocol == "react",
        max_chars=contract.max_reply_chars,
        fail_is_a_field=isinstance(properties, dict) and "fail" in properties,
    )
