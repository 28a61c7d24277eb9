"""Tool sources: objects that supply tools known only once they are connected.

An MCP server's tools exist only once the server is connected, and may change while it
is. Such an object goes in ``SubAgent(tools=[...])`` beside plain functions; it satisfies
:class:`ToolSource`, and each run reads its current tools (a cached list, never a call to
the server), so a run started after a refresh sees the new list and a run under way keeps
the list it started with.

:class:`AgentTools` keeps an agent's fixed tools and its sources, and builds the run's tool
set, refusing two tools of one name (a name clash is never resolved silently).

A source that goes away mid-run (its server process died, its endpoint is gone) says so by
raising :class:`ToolSourceLostError` from its tools' calls: the call is a tool error like any
other, and the run then ends ``failed(tool_server_lost)`` (the :class:`Toolbox` marks the
call, the loop fires the state table's row), rather than going on without the source.

:func:`mapped_source` is the seam that changes a source's tools from outside the loop: a
source of its own whose tools are another source's, each passed through a function (how a
durable agent makes each call of an MCP tool a checkpointed step).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from subagent._errors import ConfigurationError, SubAgentError
from subagent.tools._tool import Tool

__all__ = [
    "AgentTools",
    "MappedSource",
    "SourceNotReadyError",
    "ToolSource",
    "ToolSourceLostError",
    "mapped_source",
    "split_sources",
]


class SourceNotReadyError(ConfigurationError):
    """A tool source cannot supply tools now (an MCP server not connected)."""

    def __init__(self, message: str):
        super().__init__("tools", message)


class ToolSourceLostError(SubAgentError):
    """A tool's source went away during a run: raised by the tool's call.

    The call becomes a failed :class:`~subagent.ToolResult` (``error_type=
    "tool_server_lost"``, the message as the text the model reads), the other calls of the
    turn finish, and the run then ends ``failed`` with ``FailReason.TOOL_SERVER_LOST``
    (``retryable``: a restarted server may serve the same run). An MCP server raises it
    (as ``MCPServerLostError``) when its process exits or its endpoint goes away; a Python
    tool that depends on a service may raise it too.

    Args:
        message: What happened, naming the source (``MCP server 'calc' went away: ...``).
        source: The source's name for messages (``MCP server 'calc'``).
    """

    def __init__(self, message: str, *, source: str):
        super().__init__(message)
        self.source = source


@runtime_checkable
class ToolSource(Protocol):
    """Something that supplies tools to an agent once it is ready (an MCP server).

    Implementations keep their tool list cached: :meth:`current_tools` is called at the
    start of every run and must not wait on anything.
    """

    @property
    def source_name(self) -> str:
        """A name for messages (``MCP server 'calc'``)."""
        ...

    def current_tools(self) -> tuple[int, Sequence[Tool]]:
        """The source's revision and its tools now.

        The revision changes whenever the list does (unique across sources), so an agent
        can keep what it built from one list until the revision moves.

        Raises:
            SourceNotReadyError: The source cannot supply tools now (not connected).
        """
        ...


def mapped_source(source: ToolSource, wrap: Callable[[Tool], Tool]) -> MappedSource:
    """``source`` with each tool it lists passed through ``wrap``: a tool source of its own.

    The result goes in ``SubAgent(tools=[...])`` in the source's place, and is read like any
    source (see :class:`MappedSource`): the agent sees the wrapped tools, rebuilt when the
    source's list moves. ``wrap`` is how a tool changes for every run without the loop
    knowing: ``subagent.durable`` makes each call of an MCP server's tool a DBOS step with
    ``mapped_source(server, durable_tool)``.

    Args:
        source: The tool source (an MCP server, a view of one, another mapped source).
        wrap: Takes one of the source's tools and returns the tool to offer in its place
            (usually the same name, description and schema, its function wrapped). It is
            called once per tool per listing, when a run first reads that listing.

    Raises:
        ConfigurationError: ``source`` is not a tool source, or ``wrap`` is not callable.
    """
    if isinstance(source, Tool) or not isinstance(source, ToolSource):
        raise ConfigurationError("tools", f"{source!r} is not a tool source")
    if not callable(wrap):
        raise ConfigurationError("wrap", f"must be a function from Tool to Tool, got {wrap!r}")
    return MappedSource(source, wrap)


class MappedSource:
    """The tools of another source, each passed through a function (see :func:`mapped_source`).

    It is the source it wraps but for its tools: the same :attr:`source_name` (for
    messages), the same revision (so an agent rebuilds what it built from a listing exactly
    when the source's list moves), the same readiness (:class:`SourceNotReadyError` passes
    through) and the same connection (the wrapped tools call the source's own). A source
    that goes away raises :class:`ToolSourceLostError` from the wrapped tools' calls as
    from its own, unless the function changes that, so the run still ends
    ``failed(tool_server_lost)``.

    The wrapped tools are built once per listing and shared by the runs that read it.

    Attributes:
        source: The source it wraps.
        wrap: The function each of its tools goes through.
    """

    __slots__ = ("_built", "source", "wrap")

    def __init__(self, source: ToolSource, wrap: Callable[[Tool], Tool]):
        self.source = source
        self.wrap = wrap
        self._built: tuple[int, tuple[Tool, ...]] | None = None

    @property
    def source_name(self) -> str:
        """The wrapped source's name for messages."""
        return self.source.source_name

    def current_tools(self) -> tuple[int, Sequence[Tool]]:
        """The wrapped source's revision and its tools now, each passed through ``wrap``.

        Raises:
            SourceNotReadyError: The wrapped source cannot supply tools now.
            ConfigurationError: ``wrap`` returned something that is not a
                :class:`~subagent.Tool` (the message names the tool), or the wrapped source
                refused its listing.
        """
        revision, tools = self.source.current_tools()
        built = self._built
        if built is not None and built[0] == revision:
            return built
        wrapped = tuple(self._wrapped(tool) for tool in tools)
        built = (revision, wrapped)
        self._built = built
        return built

    def _wrapped(self, tool: Tool) -> Tool:
        result = self.wrap(tool)
        if not isinstance(result, Tool):
            raise ConfigurationError(
                "wrap", f"{self.wrap!r} returned {result!r} for the tool {tool.name!r} of "
                f"{self.source_name}: it must return a Tool",
            )  # fmt: skip
        return result

    def __repr__(self) -> str:
        return f"mapped_source({self.source!r}, {self.wrap!r})"


def split_sources(
    tools: Iterable[Tool | Callable[..., Any] | ToolSource],
) -> tuple[list[Tool | Callable[..., Any]], tuple[ToolSource, ...]]:
    """``SubAgent(tools=...)`` split into plain tools and tool sources (order kept)."""
    if isinstance(tools, str | bytes) or not isinstance(tools, Iterable):
        raise ConfigurationError("tools", f"must be a list of callables, got {tools!r}")
    plain: list[Tool | Callable[..., Any]] = []
    sources: list[ToolSource] = []
    for item in tools:
        if not isinstance(item, Tool) and isinstance(item, ToolSource):
            if any(item is known for known in sources):
                raise ConfigurationError("tools", f"{item.source_name} is listed twice")
            sources.append(item)
        else:
            plain.append(item)
    return plain, tuple(sources)


class AgentTools:
    """An agent's fixed tools and its tool sources, made into one set per run.

    Args:
        fixed: The tools known when the agent is built, by name.
        sources: The sources whose tools are read at the start of each run.
    """

    __slots__ = ("_built", "fixed", "sources")

    def __init__(self, fixed: Mapping[str, Tool], sources: Sequence[ToolSource]):
        self.fixed = dict(fixed)
        self.sources = tuple(sources)
        self._built: tuple[tuple[int, ...], dict[str, Tool]] | None = None

    def current(self) -> tuple[tuple[int, ...], dict[str, Tool]]:
        """The sources' revisions and every tool by name, the fixed ones first.

        The result is kept until a source's revision moves.

        Raises:
            SourceNotReadyError: A source cannot supply tools now.
            ConfigurationError: Two tools share a name (the message names both owners).
        """
        listed = [source.current_tools() for source in self.sources]
        revisions = tuple(revision for revision, _ in listed)
        built = self._built
        if built is not None and built[0] == revisions:
            return built
        owners = dict.fromkeys(self.fixed, "a Python tool")
        tools = dict(self.fixed)
        for source, (_, source_tools) in zip(self.sources, listed, strict=True):
            for tool in source_tools:
                owner = owners.get(tool.name)
                if owner is not None:
                    raise ConfigurationError(
                        "tools",
                        f"two tools are named {tool.name!r}: {owner} and one of "
                        f"{source.source_name} (filter one out, or give the server a prefix)",
                    )
                owners[tool.name] = f"one of {source.source_name}"
                tools[tool.name] = tool
        result = (revisions, tools)
        self._built = result
        return result
