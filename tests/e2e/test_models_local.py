"""The documented path on the documented server: README's "Real models" block, and the output
modes, against llama-cpp-python serving Qwen2.5-Coder 0.5B (scripts/local_llm.py).

The README block runs as written, with ``SUBAGENT_LLM`` pointing at the local server as
``local_llm.py run`` sets it. The output modes are asked of both server set-ups (the model's
own chat format, and ``--tools``: chatml-function-calling): the server's grammar must make
the answer valid for its schema whatever the model would have written, so each answer is
checked against the schema. docs/models.md's table of modes by set-up records what these
tests check.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import re
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import local_llm
import pytest

from subagent import LLMError, OpenAIChat
from subagent.llm import LLMRequest, Message, OutputRequest, ToolDefinition, forget_profiles
from subagent.llm._profile import LLAMA_CPP_PYTHON

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

README = Path(__file__).resolve().parents[2] / "README.md"

# A question a small model answers in prose when nothing constrains it.
QUESTION = "Tell me about tomorrow's weather in Oslo: a high of 14 degrees, some rain later."
FORECAST = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "high_c": {"type": "integer"},
        "rain": {"type": "boolean"},
    },
    "required": ["city", "high_c", "rain"],
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # both backends are covered by the unit tests; these calls are slow


@pytest.fixture(params=["qwen", "qwen_tools"])
def set_up(request: pytest.FixtureRequest) -> local_llm.LocalServer:
    """Both server set-ups: the model's own chat format, and chatml-function-calling."""
    forget_profiles()
    server: local_llm.LocalServer = request.getfixturevalue(request.param)
    return server


def readme_block(heading: str) -> str:
    """The first Python block under ``## heading`` in README.md."""
    text = README.read_text(encoding="utf-8")
    section = text.split(f"\n## {heading}\n", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None, heading
    return match.group(1)


def test_the_readme_real_models_block_runs_on_the_local_model(
    qwen: local_llm.LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("OPENAI_BASE_URL", "OPENAI_MODEL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SUBAGENT_LLM", qwen.spec)  # as `local_llm.py run` sets it
    forget_profiles()
    namespace: dict[str, Any] = {}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(readme_block("Quickstart"), "README.md", "exec"), namespace)  # defines agent
    code = compile(
        readme_block("Real models"), "README.md", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    )
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        coroutine = eval(code, namespace)
        anyio.run(lambda: coroutine)

    step = namespace["step"]
    assert printed.getvalue().splitlines() == ["value=3"], step.summary()
    # Told to make no call the request does not need, the 0.5B answers 1+2 itself; a call
    # it writes (as text: the profile reads it as a call) is read and runs.
    for turn in step.turns:
        assert [call.name for call in turn.tool_calls] in ([], ["add"]), step.summary()
        assert all(result.ok for result in turn.tool_results), step.summary()


@pytest.mark.parametrize("mode", ["json_schema", "tool"])
async def test_each_output_mode_gives_a_schema_valid_answer(
    set_up: local_llm.LocalServer, mode: Any
) -> None:
    output = OutputRequest(mode=mode, json_schema=FORECAST, name="forecast")
    request = LLMRequest(
        messages=(Message(role="user", content=QUESTION),), output=output,
        settings={"max_tokens": 80},
    )  # fmt: skip
    async with OpenAIChat("local", base_url=set_up.base_url, timeout=120, _environ={}) as llm:
        assert await llm.find_profile() is LLAMA_CPP_PYTHON  # identified by GET /models
        reply = await llm.complete(request)
    assert reply.tool_calls == []
    jsonschema.validate(json.loads(reply.text), FORECAST)


async def test_a_forced_answer_tool_is_taken_beside_the_agents_tools(
    set_up: local_llm.LocalServer,
) -> None:
    lookup = ToolDefinition(
        name="lookup",
        description="Look up the weather of a city.",
        parameters={"type": "object", "properties": {"city": {"type": "string"}}},
    )
    output = OutputRequest(mode="tool", json_schema=FORECAST, name="forecast")
    request = LLMRequest(
        messages=(Message(role="user", content=QUESTION),), tools=[lookup], output=output,
        settings={"max_tokens": 80},
    )  # fmt: skip
    async with OpenAIChat("local", base_url=set_up.base_url, timeout=120, _environ={}) as llm:
        reply = await llm.complete(request)
    jsonschema.validate(json.loads(reply.text), FORECAST)


async def test_openais_json_schema_form_is_refused_by_llama_cpp_python(
    qwen: local_llm.LocalServer,
) -> None:
    output = OutputRequest(mode="json_schema", json_schema=FORECAST)
    request = LLMRequest(messages=(Message(role="user", content=QUESTION),), output=output)
    async with OpenAIChat(
        "local", base_url=qwen.base_url, timeout=120, profile="openai-compatible", _environ={}
    ) as llm:  # fmt: skip
        with pytest.raises(LLMError) as caught:
            await llm.complete(request)
    assert caught.value.kind.value == "bad_request"
    assert "response_format" in caught.value.message
