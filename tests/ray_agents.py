"""Agents and scripted models that Ray workers import by reference (``tests/test_ray.py``).

Workers find this module because Ray gives them the driver's ``sys.path`` (pytest puts
``tests/`` on it).
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
import ray
from pydantic import BaseModel

from subagent import LLMRequest, LLMResponse, SubAgent, Tool, ToolCall

CRASH = 666
"""An input that ends its whole shard: the model raises past the batch's isolation."""


class Doubled(BaseModel):
    value: int


class ShardCrash(BaseException):
    """Not an ``Exception``: no run catches it, so the shard's task fails."""


def _number(request: LLMRequest) -> int:
    return int(str(request.messages[1].content).splitlines()[0].split()[-1])


class Doubler:
    """Doubles the number at the end of the task after ``delay`` seconds.

    A negative number gets a reply that is not JSON (the run fails, budget exhausted);
    :data:`CRASH` raises :class:`ShardCrash`.
    """

    model_name = "doubler"
    provider_name = "scripted"

    def __init__(self, delay: float = 0.0):
        self.delay = delay

    async def complete(self, request: LLMRequest) -> LLMResponse:
        n = _number(request)
        if self.delay:
            await anyio.sleep(self.delay)
        if n == CRASH:
            raise ShardCrash(f"input {n}")
        if n < 0:
            return LLMResponse(text="no idea")
        return LLMResponse(text=json.dumps({"value": 2 * n}))


class OpenedDoubler(Doubler):
    """A Doubler that answers only between ``async with`` enter and exit (like OpenAIChat)."""

    def __init__(self) -> None:
        super().__init__()
        self.open = False

    async def __aenter__(self) -> OpenedDoubler:
        self.open = True
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.open = False

    async def complete(self, request: LLMRequest) -> LLMResponse:
        if not self.open:
            raise RuntimeError("the model was not opened")
        return await super().complete(request)


class DiesOnce(Doubler):
    """A Doubler that logs every call and, the first time it is asked to double ``at``,
    waits for ``signal`` (if any) and then kills its worker process (``os._exit``).

    ``flag`` (a file) marks that it died once: the input's next run answers. ``log`` gets
    one line per call, the number asked for.
    """

    def __init__(self, at: int, flag: Path, log: Path, signal: Any = None):
        super().__init__()
        self.at, self.flag, self.log, self.signal = at, flag, log, signal

    async def complete(self, request: LLMRequest) -> LLMResponse:
        n = _number(request)
        with self.log.open("a", encoding="utf-8") as log:
            log.write(f"{n}\n")
        if n == self.at and not self.flag.exists():
            self.flag.touch()
            if self.signal is not None:
                await self.signal.wait.remote()
            os._exit(1)
        return await super().complete(request)


@ray.remote
class Signal:
    """Holds a caller until the test sends it (a Ray async actor: its loop is asyncio)."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    async def send(self) -> None:
        self._event.set()

    async def wait(self) -> None:
        await self._event.wait()


double = SubAgent(name="double", prompt="Double {{n}}", output=Doubled, max_turns=1,
                  llm=Doubler())  # fmt: skip
"""Answers at once."""

slow_double = SubAgent(name="slow_double", prompt="Double {{n}}", output=Doubled, max_turns=1,
                       llm=Doubler(delay=0.2))  # fmt: skip
"""Answers after 0.2 s: a shard of a few runs outlasts the scheduling of the next one."""

no_model = SubAgent(name="no_model", prompt="Double {{n}}", output=Doubled, max_turns=1)
"""Needs ``llm=`` from the caller."""


class Releaser:
    """Calls the ``release`` tool with the number of the task (every run pauses there)."""

    model_name = "releaser"
    provider_name = "scripted"

    async def complete(self, request: LLMRequest) -> LLMResponse:
        call = ToolCall(id="call-1", name="release", arguments={"n": _number(request)})
        return LLMResponse(tool_calls=(call,))


def release(n: int) -> str:
    """Release build ``n``."""
    return f"released {n}"


deploy = SubAgent(name="deploy", prompt="Release {{n}}", max_turns=2, llm=Releaser(),
                  tools=[Tool(release, requires_approval=True)])  # fmt: skip
"""Asks for approval of its one tool call: every run of it pauses."""
