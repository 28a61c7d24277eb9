"""Shared fixtures: the anyio backends, the scripted OpenAI-compatible server, spans."""

from collections.abc import Iterator

import pytest
from openai_server import ScriptedServer, running_server
from support import Logged, Metered, Traced


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def shared_server() -> Iterator[ScriptedServer]:
    """One real HTTP server on 127.0.0.1 per test module."""
    with running_server() as running:
        yield running


@pytest.fixture
def server(shared_server: ScriptedServer) -> Iterator[ScriptedServer]:
    """The module's server, with an empty script and no recorded requests."""
    shared_server.reset()
    yield shared_server
    shared_server.reset()


@pytest.fixture
def traced() -> Iterator[Traced]:
    """A private SDK tracer provider recording spans in memory (never the global one)."""
    recorder = Traced()
    yield recorder
    recorder.provider.shutdown()


@pytest.fixture
def logged() -> Iterator[Logged]:
    """A global SDK logger provider recording events in memory, unset again afterwards."""
    recorder = Logged()
    try:
        yield recorder
    finally:
        recorder.close()


@pytest.fixture
def metered() -> Iterator[Metered]:
    """A global SDK meter provider recording metrics in memory, unset again afterwards."""
    recorder = Metered()
    try:
        yield recorder
    finally:
        recorder.close()
