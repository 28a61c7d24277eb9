"""The model a command's runs call, chosen once and said on stderr.

``--llm``, else the agent's own ``llm=``, else the environment's, else (asked for with
``--local-model``) a local model that :mod:`subagent.local_model` sets up and starts for
the command. Explicit beats implicit.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any, cast

import httpx

from subagent import local_model
from subagent._agent import SubAgent
from subagent._errors import ConfigurationError
from subagent.cli._status import UsageError
from subagent.llm import LLM, OpenAIChat, open_llm

__all__ = ["chosen_model", "describe_model", "opened", "safe_url"]

_LOCAL_TIMEOUT = 180.0  # seconds for one call of a small model on a busy CPU


@contextlib.contextmanager
def chosen_model(agent: SubAgent[Any], args: argparse.Namespace) -> Iterator[LLM]:
    """The model for the runs, announced on stderr with where it comes from.

    A local model (``--local-model``) is set up and started on entry and stopped on exit.

    Raises:
        UsageError: No model is configured anywhere (the message says what to set), a flag
            or variable naming one is malformed, or the local model's set-up failed.
    """
    if args.llm is not None:
        try:
            chosen = open_llm(args.llm, field="--llm")
        except ConfigurationError as exc:
            raise UsageError(f"--llm: {exc.message}") from None
        _announce(chosen, "--llm")
        yield chosen
        return
    if agent.llm is not None:
        own = cast(LLM, agent.llm)  # a spec string is an LLMSpec once the agent is built
        _announce(own, "the agent's own llm=")
        yield own
        return
    spec = os.environ.get("SUBAGENT_LLM", "").strip()
    if spec or OpenAIChat.env_configured():
        try:
            configured: LLM = (
                open_llm(spec, field="SUBAGENT_LLM")
                if spec
                else OpenAIChat.from_env(text_tool_calls=True)
            )
        except ConfigurationError as exc:
            raise UsageError(str(exc)) from None
        _announce(configured, "SUBAGENT_LLM" if spec else "OPENAI_*")
        yield configured
        return
    if args.local_model is None:
        raise UsageError(
            "no model: pass --llm or set SUBAGENT_LLM (e.g. 'openai:gpt-4o-mini', or "
            "'openai:local@http://127.0.0.1:8080/v1'), or OPENAI_BASE_URL and OPENAI_MODEL; "
            f"or --local-model {local_model.DEFAULT_MODEL} to build (minutes, the first time) "
            "and start a local model"
        )
    with _local(args.local_model) as started:
        yield started


@contextlib.contextmanager
def _local(name: str) -> Iterator[LLM]:
    """The local model ``name``, set up if needed, started, and stopped after."""
    print(
        f"starting the local model {name!r} (subagent.local_model; the first time it builds "
        "the server and downloads the weights, several minutes)",
        file=sys.stderr,
    )
    flag = f"--local-model {name}"
    try:
        server = local_model.start(name)  # sets up what is missing, under the cache's lock
    except local_model.SetupError as exc:
        raise UsageError(f"{flag}: {exc}") from None
    try:
        started = OpenAIChat(model=local_model.MODEL_ALIAS, base_url=server.base_url,
                             timeout=_LOCAL_TIMEOUT, text_tool_calls=True,
                             _environ={})  # fmt: skip
        _announce(started, flag)
        yield started
    finally:
        server.stop()


def _announce(llm: LLM, where: str) -> None:
    print(f"model: {describe_model(llm)} ({where})", file=sys.stderr)


def describe_model(llm: LLM) -> str:
    """The model's name and, for an HTTP one (``base_url``), its server.

    Never a key or URL credentials.
    """
    name = getattr(llm, "model_name", None)
    shown = name if isinstance(name, str) and name else type(llm).__name__
    base_url = getattr(llm, "base_url", None)
    if isinstance(base_url, str) and base_url:
        return f"{shown} at {safe_url(base_url)}"
    return shown


def safe_url(url: str) -> str:
    """``url`` without user, password, query or fragment (where credentials may hide)."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        return "(an invalid URL)"
    host = f"[{parsed.host}]" if ":" in parsed.host else parsed.host
    port = f":{parsed.port}" if parsed.port else ""
    return f"{parsed.scheme}://{host}{port}{parsed.path}"


@contextlib.asynccontextmanager
async def opened(llm: LLM) -> AsyncIterator[None]:
    """Close the model's connections after the runs, when it has any (``aclose()``)."""
    aclose = getattr(llm, "aclose", None)
    try:
        yield
    finally:
        if callable(aclose):
            await aclose()
