"""Test doubles for code that runs agents: models that need no server, and the switches.

- :class:`ScriptedLLM` plays a fixed script of replies, in order.
- :class:`TestLLM` answers by itself: it calls each tool offered to it once, with
  arguments its schema accepts, then returns an output the agent's schema accepts.
- :class:`FunctionLLM` hands each request to a function of yours, which decides the reply.
- ``agent.override(llm=...)`` (:meth:`subagent.SubAgent.override`) runs an agent on a test
  model inside a ``with`` block, for code that runs its own agents.
- :func:`block_model_requests` makes every real model request raise;
  :func:`allow_model_requests` lifts it inside a block.

Each model records every request in ``requests`` and streams its replies in pieces, so
tests of agents (yours and ours) need no network and no real model. ``from subagent import
ScriptedLLM, TestLLM, FunctionLLM`` gives the same classes. See ``docs/testing.md``.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal, TypeAlias

import pydantic_core

from subagent._errors import ConfigurationError, ScriptExhaustedError
from subagent._json_values import SchemaValueError, value_for
from subagent.llm import LLMRequest, LLMResponse, Message, StreamDelta, ToolCall, Usage
from subagent.llm._allow import model_requests_allowed, set_model_requests_allowed
from subagent.parsers._json_extract import iter_json_candidates

__all__ = [
    "FunctionLLM",
    "ScriptedLLM",
    "ScriptedReply",
    "TestLLM",
    "allow_model_requests",
    "block_model_requests",
]


ScriptedReply: TypeAlias = (
    str
    | LLMResponse
    | BaseException
    | Callable[[LLMRequest], "str | LLMResponse | Awaitable[str | LLMResponse]"]
)


class ScriptedLLM:
    """A deterministic LLM for tests and examples: it plays a script of replies in order.

    Each script item is the reply to one call: a ``str`` (the reply text), an
    :class:`LLMResponse`, an exception instance (raised from ``complete``), or a callable
    taking the :class:`LLMRequest` and returning one of the first two (sync or async).

    The items are checked when the script is built (and by :meth:`extend`): anything else is
    a :class:`~subagent.ConfigurationError` naming its position. Every request is recorded in
    :attr:`requests`. Running past the end of the script raises
    :class:`~subagent.ScriptExhaustedError` naming the call that had no reply. It is a bug in
    the test, not a model failure: it is never retried and propagates out of ``run`` (with
    the turns made so far in ``.turns``) instead of ending the run as a failed step.

    Args:
        script: The replies, in call order.
        model_name: Reported as the model in traces.
    """

    provider_name = "scripted"

    def __init__(self, script: Sequence[ScriptedReply] = (), *, model_name: str = "scripted"):
        self._script: list[ScriptedReply] = _checked(script, 0)
        self._position = 0
        self.model_name = model_name
        self.requests: list[LLMRequest] = []

    @property
    def remaining(self) -> int:
        """How many scripted replies have not been used yet."""
        return len(self._script) - self._position

    def extend(self, replies: Sequence[ScriptedReply]) -> None:
        """Append more replies to the script (checked like the script's own)."""
        self._script.extend(_checked(replies, len(self._script)))

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """Record the request and return the next scripted reply."""
        self.requests.append(request)
        if self._position >= len(self._script):
            raise ScriptExhaustedError(
                f"ScriptedLLM has no reply for call {len(self.requests)}: "
                f"the script held {len(self._script)} replies"
            )
        item = self._script[self._position]
        self._position += 1
        if isinstance(item, BaseException):
            raise item
        if callable(item) and not isinstance(item, LLMResponse):
            produced = item(request)
            if isinstance(produced, Awaitable):
                produced = await produced
            item = produced
        return _as_response(item)

    async def stream(self, request: LLMRequest) -> AsyncIterator[StreamDelta]:
        """Stream the next scripted reply word by word, reasoning first, then the response."""
        for delta in _in_pieces(await self.complete(request)):
            yield delta


def _checked(script: Sequence[ScriptedReply], start: int) -> list[ScriptedReply]:
    """The script's items as a list, once each is a reply a script may hold.

    Raises:
        ConfigurationError: An item is none of them (naming its position and type), or the
            script is a single string or reply rather than a sequence of them.
    """
    if isinstance(script, str | bytes | LLMResponse) or not isinstance(script, Sequence):
        raise ConfigurationError(
            "script", f"must be a list of replies, got {type(script).__name__}: {script!r:.80}"
        )
    items = list(script)
    for position, item in enumerate(items, start=start):
        if not isinstance(item, str | LLMResponse | BaseException) and not callable(item):
            raise ConfigurationError(
                "script",
                f"item {position} is a {type(item).__name__} ({item!r:.80}); a scripted reply "
                f"must be a str, an LLMResponse, an exception instance or a callable "
                f"returning str/LLMResponse",
            )
    return items


def _as_response(item: object) -> LLMResponse:
    if isinstance(item, LLMResponse):
        return item
    if isinstance(item, str):
        return LLMResponse(text=item)
    raise TypeError(
        f"a scripted reply must be a str, an LLMResponse, an exception or a callable "
        f"returning str/LLMResponse; got {type(item).__name__}"
    )


def _split_keeping_spaces(text: str) -> list[str]:
    pieces: list[str] = []
    start = 0
    for index, char in enumerate(text):
        if char == " ":
            pieces.append(text[start : index + 1])
            start = index + 1
    if start < len(text):
        pieces.append(text[start:])
    return pieces


def _in_pieces(response: LLMResponse) -> Iterator[StreamDelta]:
    """A whole reply as a stream: its reasoning, then its text, word by word; then itself."""
    for piece in _split_keeping_spaces(response.reasoning):
        yield StreamDelta(reasoning=piece)
    for piece in _split_keeping_spaces(response.text):
        yield StreamDelta(text=piece)
    yield StreamDelta(response=response)


# --- TestLLM ---


class TestLLM:
    """A model for tests that answers by itself, from what the request offers.

    On the first call of a run that offers tools, it calls each of them once (or those
    named in ``call_tools``), with arguments made up from each tool's JSON schema. Then it
    answers: with ``output`` when given, else with a value made up from the agent's output
    schema (the one the runtime puts in the system prompt, or an OpenAI
    ``response_format`` in the request's settings), written as JSON; with no schema (a
    ``str`` output, a parser of your own) it answers with the tool results as a JSON
    object by tool name, or ``"ok"`` when no tool was called. The made-up values are the
    plainest the schema accepts (``0``, ``"a"``, the first ``enum`` member, one item per
    list); ``seed`` varies them.

    It speaks the native protocol (tool calls in the reply); for ``protocol="react"`` use
    :class:`ScriptedLLM` or :class:`FunctionLLM`. A correction turn gets the same answer
    again. Usage is counted in words (whitespace-separated), so usage limits can be tested.

    Args:
        call_tools: ``"all"`` (default), the names of the tools to call, or ``()`` to call
            none.
        output: The answer to give instead of a made-up one: a ``str`` is sent as it is,
            anything else (a dict, a pydantic model...) as JSON.
        seed: Varies the made-up values (0: the plainest).
        model_name: Reported as the model in traces and in ``LLMResponse.model``.

    Raises:
        ConfigurationError: ``call_tools`` is neither ``"all"`` nor a list of names. At a
            call: a name in ``call_tools`` is not a tool offered, or a schema asks for a
            value it cannot make up (a ``pattern`` none of its tries matches); the message
            says which and suggests ``output=``.
    """

    __test__ = False  # not a pytest test class, whatever a test module imports it as
    provider_name = "test"

    def __init__(
        self,
        *,
        call_tools: Sequence[str] | Literal["all"] = "all",
        output: Any = None,
        seed: int = 0,
        model_name: str = "test",
    ) -> None:
        if call_tools != "all" and (
            isinstance(call_tools, str)
            or not isinstance(call_tools, Sequence)
            or not all(isinstance(name, str) for name in call_tools)
        ):
            raise ConfigurationError(
                "call_tools", f'must be "all" or a list of tool names, got {call_tools!r:.80}'
            )
        self.call_tools = call_tools if call_tools == "all" else tuple(call_tools)
        self.output = output
        self.seed = seed
        self.model_name = model_name
        self.requests: list[LLMRequest] = []

    def __repr__(self) -> str:
        return f"TestLLM(model_name={self.model_name!r})"

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """Record the request; call the offered tools on a run's first call, else answer."""
        self.requests.append(request)
        calls = self._tool_calls(request)
        text = "" if calls else self._answer(request)
        return LLMResponse(
            text=text, tool_calls=calls, model=self.model_name,
            usage=Usage(input_tokens=sum(_words(m.content) for m in request.messages),
                        output_tokens=_words(text) + sum(_words(json.dumps(c.arguments))
                                                         for c in calls)),
        )  # fmt: skip

    async def stream(self, request: LLMRequest) -> AsyncIterator[StreamDelta]:
        """Stream the reply word by word, then the whole response."""
        for delta in _in_pieces(await self.complete(request)):
            yield delta

    def _tool_calls(self, request: LLMRequest) -> list[ToolCall]:
        if (
            not request.tools
            or request.tool_choice == "none"  # schemas kept for caching, calls not allowed
            or self.call_tools == ()
            or _has_called_tools(request.messages)
        ):
            return []
        offered = {tool.name: tool for tool in request.tools}
        if self.call_tools == "all":
            names = list(offered)
        else:
            unknown = [name for name in self.call_tools if name not in offered]
            if unknown:
                raise ConfigurationError(
                    "call_tools",
                    f"TestLLM was told to call {', '.join(map(repr, unknown))}, which the "
                    f"request does not offer; offered: {', '.join(offered) or 'none'}",
                )
            names = list(self.call_tools)
        calls = []
        for index, name in enumerate(names):
            arguments = self._made_up(offered[name].parameters, f"the arguments of {name!r}")
            if not isinstance(arguments, dict):
                arguments = {}
            calls.append(ToolCall(name=name, arguments=arguments, id=f"test-{index}-{name}"))
        return calls

    def _answer(self, request: LLMRequest) -> str:
        if self.output is not None:
            if isinstance(self.output, str):
                return self.output
            return pydantic_core.to_json(self.output).decode()
        schema = _output_schema(request)
        if schema is not None:
            return json.dumps(self._made_up(schema, "the output"), ensure_ascii=False)
        results = _tool_results(request.messages)
        return json.dumps(results, ensure_ascii=False) if results else "ok"

    def _made_up(self, schema: Any, what: str) -> Any:
        try:
            return value_for(schema, self.seed)
        except SchemaValueError as error:
            raise ConfigurationError(
                "output" if what == "the output" else "call_tools",
                f"TestLLM cannot make up {what}: {error} (give TestLLM(output=...), or use "
                f"FunctionLLM to write this reply)",
            ) from None


_SCHEMA_KEYWORDS = frozenset(
    {"type", "properties", "$ref", "anyOf", "oneOf", "allOf", "enum", "const", "items"}
)


def _output_schema(request: LLMRequest) -> Any:
    """The schema the agent's output must match, if the request says.

    The structured-output setting's, else the last JSON schema in the system prompt (where
    the runtime puts the output instructions, after any tool schemas).
    """
    response_format = request.settings.get("response_format")
    if isinstance(response_format, dict):
        wrapped = response_format.get("json_schema")
        if isinstance(wrapped, dict) and isinstance(wrapped.get("schema"), dict):
            return wrapped["schema"]
    system = next((m.content for m in request.messages if m.role == "system"), "")
    for candidate in iter_json_candidates(system):  # spans in the prose come last first
        value = candidate.value if candidate.ok else None
        if isinstance(value, dict) and _SCHEMA_KEYWORDS.intersection(value):
            return value
    return None


def _has_called_tools(messages: Sequence[Message]) -> bool:
    return any(m.role == "assistant" and m.tool_calls for m in messages)


def _tool_results(messages: Sequence[Message]) -> dict[str, Any]:
    names = {c.id: c.name for m in messages if m.role == "assistant" for c in m.tool_calls}
    results: dict[str, Any] = {}
    for message in messages:
        if message.role == "tool":
            name = message.name or names.get(message.tool_call_id or "", "tool")
            fenced = _FENCED.search(message.content)  # the runtime's frame around a result
            content = fenced[2] if fenced else message.content
            try:
                results[name] = json.loads(content)
            except ValueError:
                results[name] = content
    return results


_FENCED = re.compile(r"^(`{3,})\n(.*?)\n\1$", re.MULTILINE | re.DOTALL)


def _words(text: str) -> int:
    return len(text.split())


# --- FunctionLLM ---

Reply: TypeAlias = "str | LLMResponse"
ReplyFunction: TypeAlias = Callable[[LLMRequest], "Reply | Awaitable[Reply]"]
StreamFunction: TypeAlias = Callable[[LLMRequest], AsyncIterator["str | StreamDelta"]]


class FunctionLLM:
    """A model for tests whose every reply a function of yours decides from the request.

    The function gets the :class:`~subagent.llm.LLMRequest` (the messages, the tools
    offered, ``request.turn``: which turn of which agent) and returns the reply: a ``str``
    (its text) or an :class:`~subagent.llm.LLMResponse` (tool calls, usage, a stop
    reason), or an awaitable of one. Raising :class:`~subagent.LLMError` plays a failed
    call (a rate limit, a server error), which the runtime retries as it would a real one.

    Streaming: with ``stream_function``, ``stream()`` yields what it yields (``str`` pieces
    of text, or :class:`~subagent.llm.StreamDelta` items; a delta carrying a ``response``
    ends the stream), and the reply is the pieces' text joined when no delta carried one.
    Without it, the function's reply is streamed word by word.

    Args:
        function: Decides each reply.
        stream_function: Decides each streamed reply (optional).
        model_name: Reported as the model in traces.

    Raises:
        ConfigurationError: ``function`` or ``stream_function`` is not callable.
    """

    provider_name = "function"

    def __init__(
        self,
        function: ReplyFunction,
        *,
        stream_function: StreamFunction | None = None,
        model_name: str = "function",
    ) -> None:
        if not callable(function):
            raise ConfigurationError("function", f"must be callable, got {function!r:.80}")
        if stream_function is not None and not callable(stream_function):
            raise ConfigurationError(
                "stream_function", f"must be callable, got {stream_function!r:.80}"
            )
        self.function = function
        self.stream_function = stream_function
        self.model_name = model_name
        self.requests: list[LLMRequest] = []

    def __repr__(self) -> str:
        name = getattr(self.function, "__qualname__", type(self.function).__name__)
        return f"FunctionLLM({name})"

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """Record the request and return the function's reply."""
        self.requests.append(request)
        produced = self.function(request)
        if isinstance(produced, Awaitable):
            produced = await produced
        return _as_response(produced)

    async def stream(self, request: LLMRequest) -> AsyncIterator[StreamDelta]:
        """Stream the reply: ``stream_function``'s pieces, else the function's, by word."""
        if self.stream_function is None:
            for delta in _in_pieces(await self.complete(request)):
                yield delta
            return
        self.requests.append(request)
        text: list[str] = []
        async for piece in self.stream_function(request):
            delta = StreamDelta(text=piece) if isinstance(piece, str) else piece
            if not isinstance(delta, StreamDelta):
                raise TypeError(
                    f"stream_function yielded a {type(piece).__name__}; it must yield str "
                    f"or StreamDelta items"
                )
            if delta.response is not None:
                yield delta
                return
            text.append(delta.text)
            yield delta
        yield StreamDelta(response=LLMResponse(text="".join(text)))


# --- blocking real requests ---


def block_model_requests(blocked: bool = True) -> None:
    """Make every real model request in this process raise (``False``: allow them again).

    Adapters that talk to a server (``OpenAIChat``, a spec string such as
    ``"openai:gpt-4o-mini"``) then raise :class:`~subagent.llm.ModelRequestsBlockedError`,
    which ends the run with an exception saying how to allow them, instead of sending.
    Test models are never blocked. Call it once, at the top of ``conftest.py``; a
    ``with allow_model_requests():`` block wins over it.
    """
    set_model_requests_allowed(not blocked)


@contextmanager
def allow_model_requests(allowed: bool = True) -> Iterator[None]:
    """Allow real model requests inside the block (``False``: block them there).

    Wins over :func:`block_model_requests` for the code in the block and the tasks it
    starts, and for nothing else: a test running beside it keeps its own setting.
    """
    with model_requests_allowed(allowed):
        yield
