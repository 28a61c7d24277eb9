"""Model profiles and output modes, against a real HTTP server on 127.0.0.1.

How OpenAIChat knows what a server can do (given, from the model string, from the host, or
asked once through GET /models and remembered), how it writes each output mode in the
server's dialect, what it reads back, and how it refuses a mode the server cannot serve:
before sending anything, with an error naming the mode and the server, never the key.
(subagent.llm._profile, and the parts of subagent.llm._openai that use it.)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from openai_server import (
    EVERY_FIELD,
    LLAMA_CPP_PYTHON,
    Dialect,
    Reply,
    ScriptedServer,
    completion,
    sse_chunk,
)

from subagent import ConfigurationError, ErrorKind, LLMError, SubAgent
from subagent.llm import (
    PROFILES,
    LLMRequest,
    LLMSpec,
    Message,
    ModelProfile,
    OpenAIChat,
    OutputRequest,
    ToolCall,
    ToolDefinition,
    UnsupportedOutputError,
    forget_profiles,
)
from subagent.llm._profile import (
    LLAMA_CPP,
    LMSTUDIO,
    OLLAMA,
    OPENAI,
    OPENAI_COMPATIBLE,
    PROFILE_CACHE_SIZE,
    VLLM,
    identify,
    remember,
    remembered,
)
from subagent.llm._profile import LLAMA_CPP_PYTHON as LLAMA_CPP_PYTHON_PROFILE
from subagent.llm._providers import parse_subagent_llm

pytestmark = pytest.mark.anyio

ANSWER = {"type": "object", "properties": {"value": {"type": "integer"}}, "required": ["value"]}
AS_JSON = OutputRequest(mode="json_schema", json_schema=ANSWER, name="answer")
AS_TOOL = OutputRequest(mode="tool", json_schema=ANSWER, name="answer")
ADD = ToolDefinition(
    name="add",
    parameters={"type": "object", "properties": {"a": {"type": "integer"}}},
)


@pytest.fixture(autouse=True)
def no_profiles_found_yet() -> Iterator[None]:
    """Each test starts with nothing remembered (one server serves a whole module)."""
    forget_profiles()
    yield
    forget_profiles()


def make_llm(server: ScriptedServer, **kwargs: Any) -> OpenAIChat:
    kwargs.setdefault("model", "served-model")
    kwargs.setdefault("api_key", "sk-secret-profile-key")
    kwargs.setdefault("timeout", 5.0)
    return OpenAIChat(base_url=server.base_url, _environ={}, **kwargs)


def ask(output: OutputRequest | None = None, **kwargs: Any) -> LLMRequest:
    return LLMRequest(messages=(Message(role="user", content="1+2?"),), output=output, **kwargs)


def answer_call(arguments: str = '{"value": 3}') -> dict[str, Any]:
    return {"id": "c1", "type": "function", "function": {"name": "answer", "arguments": arguments}}


# --- model strings ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("ollama:qwen2.5:0.5b", ("ollama", "qwen2.5:0.5b", None)),
        ("vllm:Qwen/Qwen2.5-7B@http://gpu:8000/v1", ("vllm", "Qwen/Qwen2.5-7B", "http://gpu:8000/v1")),
        ("LlamaCpp:local", ("llamacpp", "local", None)),
        ("lmstudio:@http://127.0.0.1:4321/v1", ("lmstudio", None, "http://127.0.0.1:4321/v1")),
    ],
)  # fmt: skip
def test_model_strings_name_local_servers(spec: str, expected: tuple[Any, ...]) -> None:
    assert parse_subagent_llm(spec) == expected


@pytest.mark.parametrize(
    ("spec", "base_url", "profile"),
    [
        ("ollama:qwen2.5:0.5b", "http://127.0.0.1:11434/v1", OLLAMA),
        ("vllm:Qwen/Qwen2.5-7B", "http://127.0.0.1:8000/v1", VLLM),
        ("vllm:q@http://gpu.internal:9000/v1", "http://gpu.internal:9000/v1", VLLM),
        ("llamacpp:local", "http://127.0.0.1:8080/v1", LLAMA_CPP),
        ("lmstudio:qwen", "http://127.0.0.1:1234/v1", LMSTUDIO),
    ],
)
def test_a_local_server_string_brings_its_url_and_profile_and_no_key(
    spec: str, base_url: str, profile: ModelProfile
) -> None:
    env = {"SUBAGENT_LLM": spec, "OPENAI_API_KEY": "sk-meant-for-openai",
           "OPENAI_BASE_URL": "http://10.9.9.9:1/v1"}  # fmt: skip
    llm = OpenAIChat.from_env(env)
    assert (llm.base_url, llm.profile) == (base_url, profile)
    assert "Authorization" not in llm._headers  # OpenAI's key goes to OpenAI-like servers only
    assert llm.text_tool_calls is True
    given = OpenAIChat.from_env(env, api_key="sk-for-this-server")
    assert given._headers["Authorization"] == "Bearer sk-for-this-server"


def test_ollama_needs_a_model_and_an_unknown_provider_is_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"^SUBAGENT_LLM: ollama needs a model"):
        parse_subagent_llm("ollama:@http://127.0.0.1:11434/v1")
    with pytest.raises(ConfigurationError) as unknown:
        parse_subagent_llm("tgi:model")
    assert str(unknown.value).endswith(
        "'ollama:', 'vllm:', 'llamacpp:' or 'lmstudio:' in place of 'openai:', or "
        "'anthropic:MODEL' or 'anthropic:MODEL@BASE_URL', got 'tgi:model'"
    )
    with pytest.raises(ConfigurationError, match=r"^llm: .*\[REDACTED\]") as caught:
        SubAgent(name="s", prompt="hi", llm="ollama:@http://me:hunter2@h/v1")
    assert "hunter2" not in str(caught.value)


async def test_a_local_server_string_runs_an_agent_without_a_key(
    server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-meant-for-openai")
    server.script(Reply.json(completion("four")))
    agent = SubAgent(name="s", prompt="2+2?", max_turns=1, llm=f"vllm:small@{server.base_url}")
    assert isinstance(agent.llm, LLMSpec)
    step = await agent.run()
    assert step.output == "four"
    (request,) = server.requests
    assert request.json["model"] == "small" and "authorization" not in request.headers


# --- which profile --------------------------------------------------------------------------------


def test_the_profile_comes_from_the_argument_the_string_or_the_host() -> None:
    env = {"SUBAGENT_LLM": "vllm:m@http://127.0.0.1:8000/v1"}
    assert OpenAIChat(_environ=env).profile is VLLM
    assert OpenAIChat(profile="llama-cpp-python", _environ=env).profile is LLAMA_CPP_PYTHON_PROFILE
    # a base URL given as an argument is no longer the string's server
    assert OpenAIChat(base_url="http://127.0.0.1:9/v1", _environ=env).profile is OPENAI_COMPATIBLE
    openai = OpenAIChat("gpt-4o-mini", api_key="sk-x", _environ={})
    assert openai.profile is OPENAI and openai.text_tool_calls is False
    own = ModelProfile("my-gateway", structured_output=None, forced_tool=False)
    assert OpenAIChat(base_url="http://h/v1", profile=own, _environ={}).profile is own
    assert set(PROFILES) == {
        "openai", "openai-compatible", "llama-cpp-python", "llama.cpp", "vllm", "ollama",
        "lmstudio",
    }  # fmt: skip


def test_bad_profiles_name_the_field() -> None:
    with pytest.raises(ConfigurationError, match=r"^profile: expected a ModelProfile or one of"):
        OpenAIChat(base_url="http://h/v1", profile="llama", _environ={})
    with pytest.raises(ConfigurationError, match=r"^profile.structured_output: must be one of"):
        ModelProfile("x", structured_output="grammar")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"^profile.name: must be a non-empty string"):
        ModelProfile(" ")
    with pytest.raises(ConfigurationError, match=r"^profile.forced_tool: must be True or False"):
        ModelProfile("x", forced_tool="yes")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"^text_tool_calls: must be True, False or None"):
        OpenAIChat(base_url="http://h/v1", text_tool_calls="on", _environ={})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("owned_by", "profile"),
    [
        ("me", LLAMA_CPP_PYTHON_PROFILE),
        ("llamacpp", LLAMA_CPP),
        ("vllm", VLLM),
        ("library", OLLAMA),
        ("organization_owner", LMSTUDIO),
        ("openai", OPENAI_COMPATIBLE),
        (None, OPENAI_COMPATIBLE),
    ],
)
async def test_an_unknown_server_is_identified_by_its_model_list(
    server: ScriptedServer, owned_by: str | None, profile: ModelProfile
) -> None:
    server.dialect = Dialect(owned_by=owned_by)
    async with make_llm(server) as llm:
        assert llm.profile is OPENAI_COMPATIBLE  # nothing asked yet
        assert server.gets == []
        assert await llm.find_profile() is profile
        assert llm.profile is profile
    assert server.gets == ["/v1/models"]


def test_identify_reads_the_models_entry_else_the_first() -> None:
    two = '{"data": [{"id": "a", "owned_by": "vllm"}, {"id": "b", "owned_by": "me"}]}'
    assert identify(two, "b") is LLAMA_CPP_PYTHON_PROFILE
    assert identify(two, "zzz") is VLLM
    for broken in ("", "[]", '{"data": 3}', '{"data": [1, 2]}', "not json", '{"data": [{}]}'):
        assert identify(broken, "a") is OPENAI_COMPATIBLE, broken


async def test_a_server_is_asked_once_per_base_url_and_model(server: ScriptedServer) -> None:
    server.dialect = Dialect(owned_by="vllm")
    server.script(*[Reply.json(completion('{"value": 3}'))] * 3)
    async with make_llm(server) as first, make_llm(server) as second:
        await first.complete(ask(AS_JSON))
        await second.complete(ask(AS_JSON))  # another adapter, the same server: remembered
        await first.complete(ask())  # no output mode: nothing to find out
    assert server.gets == ["/v1/models"]
    async with make_llm(server, model="other-model") as other:
        assert await other.find_profile() is VLLM
    assert len(server.gets) == 2


async def test_an_adapter_keeps_what_it_found_out_when_the_process_forgets(
    server: ScriptedServer,
) -> None:
    server.dialect = Dialect(owned_by="me")
    server.script(Reply.json(completion('{"value": 3}')))
    async with make_llm(server) as llm:
        await llm.find_profile()
        forget_profiles()  # as when more than PROFILE_CACHE_SIZE servers were asked since
        assert llm.profile is LLAMA_CPP_PYTHON_PROFILE
        await llm.complete(ask(AS_JSON))
    assert server.gets == ["/v1/models"]
    assert server.requests[0].response_format == {"type": "json_object", "schema": ANSWER}


async def test_concurrent_requests_of_one_adapter_ask_the_server_once(
    server: ScriptedServer,
) -> None:
    server.dialect = Dialect(owned_by="me")
    server.script(*[Reply.json(completion('{"value": 3}'))] * 5)
    async with make_llm(server) as llm, anyio.create_task_group() as group:
        for _ in range(5):
            group.start_soon(llm.complete, ask(AS_JSON))
    assert server.gets == ["/v1/models"] and len(server.requests) == 5


async def test_a_server_that_does_not_answer_the_question_follows_openais_api(
    server: ScriptedServer,
) -> None:
    async with OpenAIChat(
        "m", base_url="http://127.0.0.1:9/v1", timeout=2.0, _environ={}
    ) as unreachable:  # fmt: skip
        assert await unreachable.find_profile() is OPENAI_COMPATIBLE
    assert remembered("http://127.0.0.1:9/v1", "m") is OPENAI_COMPATIBLE


def test_the_remembered_profiles_are_bounded() -> None:
    for index in range(PROFILE_CACHE_SIZE + 10):
        remember(f"http://h{index}/v1", "m", VLLM)
    assert remembered("http://h0/v1", "m") is None  # the oldest went first
    assert remembered(f"http://h{PROFILE_CACHE_SIZE + 9}/v1", "m") is VLLM


async def test_a_given_profile_is_never_asked_for(server: ScriptedServer) -> None:
    server.script(Reply.json(completion('{"value": 3}')))
    async with make_llm(server, profile="vllm") as llm:
        await llm.complete(ask(AS_JSON))
    assert server.gets == []


# --- each mode in each dialect ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("profile", "field", "sent"),
    [
        (OPENAI_COMPATIBLE, "response_format", {"type": "json_schema", "json_schema": {
            "name": "answer", "strict": True,
            "schema": {**ANSWER, "additionalProperties": False}}}),
        (LLAMA_CPP_PYTHON_PROFILE, "response_format", {"type": "json_object", "schema": ANSWER}),
        (ModelProfile("old-vllm", structured_output="guided_json"), "guided_json", ANSWER),
        (ModelProfile("new-vllm", structured_output="structured_outputs"),
         "structured_outputs", {"json": ANSWER}),
    ],
)  # fmt: skip
async def test_mode_json_schema_reaches_the_server_in_its_dialect(
    server: ScriptedServer, profile: ModelProfile, field: str, sent: dict[str, Any]
) -> None:
    server.script(Reply.json(completion('{"value": 3}')))
    async with make_llm(server, profile=profile) as llm:
        reply = await llm.complete(ask(AS_JSON))
    assert reply.text == '{"value": 3}'
    (request,) = server.requests
    assert request.json[field] == sent


async def test_mode_tool_forces_the_answer_tool_and_returns_its_arguments_as_text(
    server: ScriptedServer,
) -> None:
    server.dialect = LLAMA_CPP_PYTHON
    server.script(Reply.json(completion(None, tool_calls=[answer_call()],
                                        finish_reason="tool_calls")))  # fmt: skip
    async with make_llm(server) as llm:  # identified as llama-cpp-python: forced tools work
        reply = await llm.complete(ask(AS_TOOL, tools=[ADD]))
    assert (reply.text, reply.tool_calls) == ('{"value": 3}', [])
    (request,) = server.requests
    assert request.tool_names == ["add", "answer"]
    assert request.tool_choice == {"type": "function", "function": {"name": "answer"}}


async def test_mode_tool_streams_its_answer_as_text(server: ScriptedServer) -> None:
    call = {"index": 0, "id": "c1", "type": "function",
            "function": {"name": "answer", "arguments": '{"value": '}}  # fmt: skip
    more = {"index": 0, "function": {"arguments": "3}"}}
    server.script(Reply.sse([sse_chunk(tool_calls=[call]), sse_chunk(tool_calls=[more]),
                             sse_chunk(finish_reason="tool_calls"), "[DONE]"]))  # fmt: skip
    async with make_llm(server, profile="vllm") as llm:
        deltas = [delta async for delta in llm.stream(ask(AS_TOOL))]
    final = deltas[-1].response
    assert final is not None and (final.text, final.tool_calls) == ('{"value": 3}', [])


async def test_an_answer_tool_call_written_as_text_is_read_as_the_answer(
    server: ScriptedServer,
) -> None:
    # A server that ignores tool_choice lets the model write the call as text.
    server.script(Reply.json(completion('{"name": "answer", "arguments": {"value": 3}}')))
    async with make_llm(server, profile=ModelProfile("lax", text_tool_calls=True)) as llm:
        reply = await llm.complete(ask(AS_TOOL))
    assert (reply.text, reply.tool_calls) == ('{"value": 3}', [])


# --- refusals -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("output", "profile", "reason"),
    [
        (AS_TOOL, OLLAMA, "does not enforce a named tool_choice"),
        (AS_TOOL, LLAMA_CPP, "does not enforce a named tool_choice"),
        (AS_JSON, ModelProfile("plain", structured_output=None), "has no structured output"),
    ],
)
async def test_a_mode_the_profile_cannot_serve_is_refused_before_anything_is_sent(
    server: ScriptedServer, output: OutputRequest, profile: ModelProfile, reason: str
) -> None:
    async with make_llm(server, profile=profile) as llm:
        with pytest.raises(UnsupportedOutputError) as caught:
            await llm.complete(ask(output))
        with pytest.raises(UnsupportedOutputError):
            [delta async for delta in llm.stream(ask(output))]
    error = caught.value
    assert error.kind is ErrorKind.BAD_REQUEST and error.mode == output.mode
    assert str(error).startswith(
        f"bad_request: output mode {output.mode!r} is not served by {profile.name} at "
        f"{server.base_url} (model 'served-model'): it {reason}"
    )
    assert "sk-secret-profile-key" not in str(error)
    assert server.requests == [] and server.gets == []


async def test_a_refusal_found_out_from_the_model_list_comes_before_the_request(
    server: ScriptedServer,
) -> None:
    server.dialect = Dialect(owned_by="library")  # Ollama: tool_choice is ignored
    async with make_llm(server) as llm:
        with pytest.raises(UnsupportedOutputError, match=r"by ollama at http://127\.0\.0\.1"):
            await llm.complete(ask(AS_TOOL))
    assert server.gets == ["/v1/models"] and server.requests == []


async def test_a_server_that_refuses_a_field_it_was_not_known_to_refuse_fails_as_bad_request(
    server: ScriptedServer,
) -> None:
    # llama-cpp-python told the wrong profile: its request model refuses json_schema.
    server.dialect = LLAMA_CPP_PYTHON
    async with make_llm(server, profile="openai-compatible") as llm:
        with pytest.raises(LLMError) as caught:
            await llm.complete(ask(AS_JSON))
    assert caught.value.kind is ErrorKind.BAD_REQUEST  # a validation 500: not retried
    assert "'loc': ('body', 'response_format', 'type')" in caught.value.message
    assert caught.value.status_code == 500


@pytest.mark.parametrize(
    ("takes", "profile"),
    [
        (frozenset({"json_schema"}), OPENAI_COMPATIBLE),
        (frozenset({"json_object"}), LLAMA_CPP_PYTHON_PROFILE),
        (frozenset({"guided_json"}), ModelProfile("v", structured_output="guided_json")),
        (frozenset({"structured_outputs"}),
         ModelProfile("v", structured_output="structured_outputs")),
    ],
)  # fmt: skip
async def test_each_dialect_is_taken_by_a_server_of_that_dialect_only(
    server: ScriptedServer, takes: frozenset[str], profile: ModelProfile
) -> None:
    server.dialect = Dialect(takes=takes)
    server.script(Reply.json(completion('{"value": 3}')))
    async with make_llm(server, profile=profile) as llm:
        assert (await llm.complete(ask(AS_JSON))).text == '{"value": 3}'
    server.dialect = Dialect(takes=EVERY_FIELD - takes)
    async with make_llm(server, profile=profile) as llm:
        with pytest.raises(LLMError) as caught:
            await llm.complete(ask(AS_JSON))
    assert (caught.value.kind, caught.value.status_code) == (ErrorKind.BAD_REQUEST, 400)
    assert len(server.requests) == 2


# --- text tool calls by profile ----------------------------------------------------------------


async def test_calls_written_as_text_are_read_on_every_server_but_openais(
    server: ScriptedServer,
) -> None:
    text = '{"name": "add", "arguments": {"a": 1}}'
    server.script(*[Reply.json(completion(text))] * 2)
    async with make_llm(server) as local:
        assert (await local.complete(ask(tools=[ADD]))).tool_calls == [
            ToolCall(name="add", arguments={"a": 1})
        ]
    async with make_llm(server, profile="openai") as strict:
        assert (await strict.complete(ask(tools=[ADD]))).text == text
