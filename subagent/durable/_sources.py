"""Tool sources in a durable run: each call a step, the listing recorded and kept.

A durable agent puts each of its agent's tool sources (MCP servers) behind a
:class:`DurableSource`: the source's tools mapped through :func:`durable_tool`
(``mapped_source``), so each call is a DBOS step named ``subagent.tool:<name>``, the name
the model calls (a server's prefix included).

A source's list may change while a run is stopped (a server upgraded between the crash and
the restart). The tools a workflow's recorded steps called must still be there when the
run is replayed, with the schema its recorded arguments were checked against: a call whose
tool is gone would be fed back to the model as an unknown tool rather than read back from
its checkpoint, and the run would go on from another history than the one it made. So the
first step of a durable run with sources (``subagent.tools:<agent>``, :func:`pin_sources`)
records the tools it starts with, by name, with a digest of what a replay depends on (the
schema, whether a call needs approval); a replay compares them with the tools listed now:

- the same tools: the run goes on with them;
- more tools: the run goes on with the tools it started with (the new ones are not
  offered to it: a run keeps the list it started with, as in one process);
- a tool gone, or changed: the run cannot go on; it raises a
  :class:`~subagent.ConfigurationError` naming the tools, and its workflow ends in error.

The run reads its tools through the listing this module pins for it (a context variable
that holds, for the run's task, the listing each source gives it), so the list a run
records is exactly the list it runs with, even when the source's list moves meanwhile.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar

from dbos import DBOS

from subagent._errors import ConfigurationError
from subagent.durable._tools import durable_tool
from subagent.records import digest
from subagent.tools import SourceNotReadyError, Tool, ToolSource, mapped_source

__all__ = ["DurableSource", "pin_sources", "pinned"]

Listing = tuple[int, tuple[Tool, ...]]

# The listing each durable source gives the run in this task (None: the live ones).
_PINS: ContextVar[Mapping[DurableSource, Listing] | None] = ContextVar(
    "subagent_durable_pins", default=None
)
# The revisions durable sources give their listings: one sequence, never reused, so a
# listing kept for one run never shares a number with another list of the same source.
_REVISIONS = itertools.count(1)
_NUMBERS_KEPT = 64  # listings a source remembers the number of (then it starts afresh)


class DurableSource:
    """A tool source whose tools' calls are DBOS steps (see the module's docstring).

    Args:
        source: The agent's tool source (an MCP server, a view of one).
    """

    __slots__ = ("_listing", "_mapped", "_numbers", "source")

    def __init__(self, source: ToolSource):
        self.source = source
        self._mapped = mapped_source(source, durable_tool)
        # The live listing: the wrapped source's revision, this source's own number for
        # it, the tools and their digests.
        self._listing: tuple[int, Listing, dict[str, str]] | None = None
        self._numbers: dict[tuple[int, frozenset[str] | None], int] = {}

    @property
    def source_name(self) -> str:
        """The source's name for messages."""
        return self.source.source_name

    def current_tools(self) -> tuple[int, Sequence[Tool]]:
        """The listing pinned for the run in this task, or else the live one.

        Raises:
            SourceNotReadyError: The source cannot supply tools now.
        """
        pins = _PINS.get()
        if pins is not None:
            pinned = pins.get(self)
            if pinned is not None:
                return pinned
        return self.live()[0]

    def live(self) -> tuple[Listing, dict[str, str]]:
        """The source's listing now, with each tool's digest (computed once per listing).

        Raises:
            SourceNotReadyError: The source cannot supply tools now.
        """
        revision, tools = self._mapped.current_tools()
        known = self._listing
        if known is not None and known[0] == revision:
            return known[1], known[2]
        listing = (self._number(revision, None), tuple(tools))
        digests = {tool.name: _digest(tool) for tool in tools}
        self._listing = (revision, listing, digests)
        return listing, digests

    def kept(self, listing: Listing, names: frozenset[str]) -> Listing:
        """``listing`` with only the tools ``names`` names, under a number of its own."""
        number = self._number(listing[0], names)
        return number, tuple(tool for tool in listing[1] if tool.name in names)

    def _number(self, revision: int, names: frozenset[str] | None) -> int:
        numbers = self._numbers
        number = numbers.get((revision, names))
        if number is None:
            if len(numbers) >= _NUMBERS_KEPT:
                numbers.clear()  # a listing seen again gets a new number: rebuilt, not wrong
            number = numbers[(revision, names)] = next(_REVISIONS)
        return number

    def __repr__(self) -> str:
        return f"DurableSource({self.source!r})"


def _digest(tool: Tool) -> str:
    """What a replayed call of ``tool`` depends on, digested.

    The schema its recorded arguments are checked against, and whether it needs approval;
    the name is the key the digest is recorded under.
    """
    return digest([tool.definition.parameters, tool.requires_approval])


async def _recorded(listing: dict[str, str]) -> dict[str, str]:
    return listing


async def pin_sources(
    sources: Sequence[DurableSource], step_name: str, run: str
) -> dict[DurableSource, Listing]:
    """The listing each source gives the run: recorded first, checked on every replay.

    See the module's docstring.

    Args:
        sources: The durable agent's sources.
        step_name: The name of the step that records the listing.
        run: The run's workflow id, for messages.

    Raises:
        SourceNotReadyError: A source is not connected (a run DBOS resumed before its
            servers were).
        ConfigurationError: A tool the run started with is gone or changed.
    """
    try:
        live = [source.live() for source in sources]
    except SourceNotReadyError as exc:
        raise SourceNotReadyError(
            f"{exc.message} (the durable run {run!r} needs it: connect every tool source "
            f"before DBOS.launch(), which resumes the runs a dead process left pending)"
        ) from exc
    now = {name: tool for _, digests in live for name, tool in digests.items()}
    started: dict[str, str] = await DBOS.run_step_async({"name": step_name}, _recorded, now)
    if started == now:  # the first execution, or a replay with the same tools
        return {source: listing for source, (listing, _) in zip(sources, live, strict=True)}
    gone = sorted(name for name in started if name not in now)
    changed = sorted(name for name in started if name in now and now[name] != started[name])
    if gone or changed:
        named = [f"gone: {', '.join(gone)}"] if gone else []
        named += [f"changed (schema or approval): {', '.join(changed)}"] if changed else []
        raise ConfigurationError(
            "tools",
            f"the durable run {run!r} cannot go on: its tool sources no longer offer the "
            f"tools it started with ({'; '.join(named)}). Its recorded steps need them: "
            f"connect the sources it ran with (the same servers, tools and prefixes)",
        )
    # More tools than when it started: the run keeps the ones it started with.
    names = frozenset(started)
    return {
        source: source.kept(listing, names)
        for source, (listing, _) in zip(sources, live, strict=True)
    }


@contextlib.contextmanager
def pinned(pins: Mapping[DurableSource, Listing] | None) -> Iterator[None]:
    """The run in this block reads its sources' tools from ``pins``."""
    if pins is None:
        yield
        return
    token = _PINS.set(pins)
    try:
        yield
    finally:
        _PINS.reset(token)
