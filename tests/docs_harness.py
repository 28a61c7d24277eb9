"""Every Python block of README.md and docs/*.md runs in the test suite, with Sybil.

The root ``conftest.py`` hands these pages to :data:`SYBIL`; pytest collects each Python
block as one item (``docs/models.md::line:12,column:1``). The conventions a page follows:

- A page's blocks run in order, in one namespace: a later block uses what an earlier one
  defined, as a reader following the page would. Top-level ``await`` (and ``async with``,
  ``async for``) is allowed: such a block runs in its own ``anyio.run``.
- ``#>`` comment lines are the block's output. A block prints exactly its ``#>`` lines, in
  order, and nothing when it has none::

      print(step.summary())
      #> done in 3 turns (normal, must_return, retry)

- A block that cannot run here (it needs a container, a paid provider...) says so, visibly,
  on the line just above its fence; it is still compiled, then reported as skipped::

      > **Not run in the test suite:** it needs a Jaeger container.

- Every fenced block names its language; Python is ``python``. ``tests/test_docs.py``
  rejects what would slip past: ``py``, an untagged fence, a note that marks no block, a
  page outside the collected paths, a relative link to nothing.

Pages talk to real models as a reader would (``OpenAIChat.from_env()``,
``OpenAIChat("gpt-4o-mini")``, ``AnthropicChat("claude-sonnet-4-5")``). :func:`open_page`
points them at a real HTTP server on 127.0.0.1 (``tests/openai_server.py``, which answers
any path: Anthropic's replies are scripted in the Messages API's shape) that plays the
page's replies from :data:`PAGE_REPLIES`, and keeps a page's OpenTelemetry global provider
from leaking into the rest of the session. The page's code is never rewritten.
"""

from __future__ import annotations

import ast
import difflib
import inspect
import io
import os
import re
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import opentelemetry._logs._internal as logs_state
import opentelemetry.metrics._internal as metrics_state
import pytest
from anthropic_server import message, text
from openai_server import Reply, ScriptedServer, completion, running_server, sse_chunk
from opentelemetry import trace
from opentelemetry.util._once import Once
from sybil import Document, Example, Region, Sybil
from sybil.parsers.markdown.lexers import RawFencedCodeBlockLexer

from subagent.observe import _semconv
from subagent.observe._otel import CAPTURE_CONTENT_ENV
from subagent.observe._semconv import STABILITY_OPT_IN_ENV

__all__ = [
    "NOT_RUN",
    "PAGE_REPLIES",
    "SYBIL",
    "Fence",
    "PythonBlock",
    "PythonBlockParser",
    "close_page",
    "fences",
    "open_page",
    "run_python_block",
]

ROOT = Path(__file__).resolve().parent.parent

#: The visible note that marks the next block as not runnable here; group 1 is the reason.
NOT_RUN = re.compile(r"^[ \t]*>[ \t]*\*\*Not run in the test suite:\*\*[ \t]*(\S.*)$")
_OUTPUT = re.compile(r"^[ \t]*#>(?: (.*)|)$")


# --- reading pages ------------------------------------------------------------------------


@dataclass(frozen=True)
class Fence:
    """One fenced block of a page: its info string (the language) and where it starts."""

    info: str
    start: int


_LEXER = RawFencedCodeBlockLexer(
    info_pattern=re.compile(r"(?P<info>[^\n]*)$\n", re.MULTILINE),
    mapping={"info": "info", "source": "source"},
)


def _regions(document: Document) -> Iterator[Region]:
    """Sybil's fenced-block regions, outermost only (a ```` fence may show a ``` one)."""
    end = -1
    for region in sorted(_LEXER(document), key=lambda region: region.start):
        if region.start >= end:
            end = region.end
            yield region


def fences(document: Document) -> list[Fence]:
    """Every fenced block of ``document``, in order, as Sybil's lexer reads them."""
    return [Fence(region.lexemes["info"].strip(), region.start) for region in _regions(document)]


@dataclass(frozen=True)
class PythonBlock:
    """A Python block: its source, the output its ``#>`` lines show, why it is not run."""

    source: str
    expected_output: tuple[str, ...]
    not_run: str | None


def _note_above(text: str, position: int) -> str | None:
    """The reason of a not-run note on the last non-blank line before ``position``."""
    for line in reversed(text[:position].splitlines()):
        if line.strip():
            match = NOT_RUN.match(line)
            return match.group(1).strip() if match else None
    return None


class PythonBlockParser:
    """Sybil parser: every fenced block whose language is ``python`` is an example."""

    def __call__(self, document: Document) -> Iterable[Region]:
        for region in _regions(document):
            if region.lexemes["info"].strip() != "python":
                continue
            source = region.lexemes["source"]
            expected = tuple(
                match.group(1) or ""
                for match in map(_OUTPUT.match, str(source).splitlines())
                if match
            )
            region.parsed = PythonBlock(
                source=source,
                expected_output=expected,
                not_run=_note_above(document.text, region.start),
            )
            region.evaluator = run_python_block
            yield region
        document.namespace["__file__"] = document.path


# --- running a block ----------------------------------------------------------------------


async def _await(awaitable: Any) -> Any:
    return await awaitable


def run_python_block(example: Example) -> None:
    """Compile the block; unless it is marked not runnable, run it and check its output."""
    __tracebackhide__ = True
    block: PythonBlock = example.parsed
    # Pad so that tracebacks point at the page's own line numbers (example.line is the fence's).
    padded = "\n" * example.line + block.source
    code = compile(
        padded, example.path, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True
    )
    if block.not_run is not None:
        pytest.skip(f"marked not runnable: {block.not_run}")
    printed = io.StringIO()
    with redirect_stdout(printed):
        result = eval(code, example.namespace)  # the page's own code
        if code.co_flags & inspect.CO_COROUTINE:
            anyio.run(_await, result)
    example.namespace.pop("__builtins__", None)
    lines = [line.rstrip() for line in printed.getvalue().splitlines()]
    expected = [line.rstrip() for line in block.expected_output]
    if lines != expected:
        diff = "\n".join(
            difflib.unified_diff(expected, lines, "the page's #> lines", "printed", lineterm="")
        )
        raise AssertionError(f"the block's output differs from its #> lines:\n{diff}")


# --- what a page runs against -------------------------------------------------------------


def _tool_call(name: str, arguments: str, call_id: str = "call-1") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


_ADD_THEN_ANSWER = [
    Reply.json(completion(None, tool_calls=[_tool_call("add", '{"a": 1, "b": 2}')],
                          finish_reason="tool_calls")),
    Reply.json(completion('{"value": 3}')),
]  # fmt: skip

#: What the loopback model answers on each page, in the order the page asks.
PAGE_REPLIES: dict[str, list[Reply]] = {
    # "Real models": the calc agent adds, then answers.
    "README.md": _ADD_THEN_ANSWER,
    "docs/models.md": [
        # The forecast agent answers at once.
        Reply.json(completion('{"city": "Oslo", "high_c": 14}')),
        # Streaming: the block leaves after "3".
        Reply.sse(
            [
                *(sse_chunk(f"{n}, ") for n in range(1, 11)),
                sse_chunk(finish_reason="stop"),
                "[DONE]",
            ]
        ),
        # Anthropic, natively: the forecast agent answers, most of its prompt from the cache.
        Reply.json(
            message(
                text('{"city": "Oslo", "high_c": 14}'),
                input_tokens=54,
                cache_read=1200,
                output_tokens=12,
            )
        ),
    ],
    "docs/output-contracts.md": [
        # think_with_retry: [Timeline] is missing, then the answer is complete.
        Reply.json(completion("[Plan]\nBlind-taste five teas.")),
        Reply.json(completion("[Plan]\nBlind-taste five teas.\n[Timeline]\nTwo weeks.")),
        # retry_loop: the fixer lists Pierre Curie.
        Reply.json(
            completion(
                '{"entities": ["Marie Curie", "Paris", "Pierre Curie"], "relations": '
                '[["Marie Curie", "worked with", "Pierre Curie"]]}'
            )
        ),
    ],
    # Quick start: the calc agent adds, then answers.
    "docs/tracing.md": _ADD_THEN_ANSWER,
}


_OPEN_PAGES: dict[str, ExitStack] = {}


def open_page(namespace: dict[str, Any]) -> None:
    """Before a page's first block: a scripted model on 127.0.0.1, a tracing global of its own.

    ``OPENAI_BASE_URL`` and ``ANTHROPIC_BASE_URL`` point at a fresh server playing the page's
    :data:`PAGE_REPLIES`; every other ``OPENAI_*``, ``ANTHROPIC_*``, ``SUBAGENT_LLM`` and
    ``OTEL_*`` variable is removed, so no
    block can reach a real provider or receiver. OpenTelemetry's global tracer and meter
    providers can be set once per process: the page gets fresh, unset ones (as
    OpenTelemetry's own test utilities reset them), and the session's are put back by
    :func:`close_page`, as are the global logger provider, the GenAI conventions' version and
    the content capture variable.
    """
    page = namespace["__file__"]
    with ExitStack() as stack:
        server = stack.enter_context(running_server())
        patch = pytest.MonkeyPatch()
        stack.callback(patch.undo)
        for name in list(os.environ):
            if name.startswith(("OPENAI_", "ANTHROPIC_", "OTEL_")) or name == "SUBAGENT_LLM":
                patch.delenv(name)
        patch.setenv("OPENAI_BASE_URL", server.base_url)
        patch.setenv("OPENAI_API_KEY", "sk-docs-test")
        patch.setenv("ANTHROPIC_BASE_URL", server.base_url)  # the same server plays both
        patch.setenv("ANTHROPIC_API_KEY", "sk-ant-docs-test")
        patch.setattr(trace, "_TRACER_PROVIDER", None)
        patch.setattr(trace, "_TRACER_PROVIDER_SET_ONCE", Once())
        patch.setattr(metrics_state, "_METER_PROVIDER", None)
        patch.setattr(metrics_state, "_METER_PROVIDER_SET_ONCE", Once())
        patch.setattr(logs_state, "_LOGGER_PROVIDER", None)
        patch.setattr(logs_state, "_LOGGER_PROVIDER_SET_ONCE", Once())
        # A block may opt in to other conventions; the page's end puts the choice back.
        patch.setattr(_semconv, "_ACTIVE", _semconv.active_semconv())
        for name in (STABILITY_OPT_IN_ENV, CAPTURE_CONTENT_ENV):  # recorded, even if unset
            patch.setenv(name, "")
            patch.delenv(name)
        server.script(*PAGE_REPLIES.get(_relative(page), ()))
        stack.callback(_check_all_replies_asked_for, page, server)
        _OPEN_PAGES[page] = stack.pop_all()


def close_page(namespace: dict[str, Any]) -> None:
    """After a page's last block: stop its server, restore the environment and tracing."""
    _OPEN_PAGES.pop(namespace["__file__"]).close()


def _relative(page: str) -> str:
    return Path(page).resolve().relative_to(ROOT).as_posix()


def _check_all_replies_asked_for(page: str, server: ScriptedServer) -> None:
    unused = server.remaining
    assert not unused, f"{_relative(page)}: {unused} scripted replies were never asked for"


SYBIL = Sybil(
    parsers=[PythonBlockParser()],
    path=str(ROOT),
    patterns=["README.md", "docs/*.md"],
    setup=open_page,
    teardown=close_page,
)
