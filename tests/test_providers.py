"""The provider seam (subagent.llm._providers): a provider registers, model strings name it.

A provider made up here registers on the seam as an adapter module would; nothing else in
the library learns of it, yet strings naming it work wherever a model is expected, and the
command line names and closes its adapter by what the adapter has, not by its class.
"""

from __future__ import annotations

import argparse
import pickle
from collections.abc import AsyncIterator, Iterator, Mapping
from types import TracebackType
from typing import Any

import pytest

from subagent import ConfigurationError, SubAgent
from subagent.cli._model import chosen_model, describe_model, opened
from subagent.llm import LLMRequest, LLMResponse, LLMSpec, OpenAIChat, StreamDelta, open_llm
from subagent.llm import _providers as providers
from subagent.llm._providers import SpecProvider, parse_subagent_llm, register

pytestmark = pytest.mark.anyio


class EchoChat:
    """An adapter of the made-up ``echo`` provider: it answers with its model's name."""

    provider_name = "echo"
    server_port = 443

    def __init__(self, model: str, base_url: str, check_key: bool) -> None:
        self.model_name = model
        self.base_url = base_url
        self.server_address = base_url.split("//", 1)[1].split("/", 1)[0]
        self.check_key = check_key
        self.closed = False
        OPENED.append(self)

    async def complete(self, request: LLMRequest) -> LLMResponse:
        return LLMResponse(text=f"{self.model_name} heard {request.messages[-1].content}")

    async def stream(self, request: LLMRequest) -> AsyncIterator[StreamDelta]:
        yield StreamDelta(response=await self.complete(request))

    async def aclose(self) -> None:
        self.closed = True

    async def __aenter__(self) -> EchoChat:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        await self.aclose()


OPENED: list[EchoChat] = []


def _open_echo(spec: str, environ: Mapping[str, str], check_key: bool) -> EchoChat:
    _, model, base_url = parse_subagent_llm(spec)
    return EchoChat(model or "", base_url or "https://echo.example/api", check_key)


@pytest.fixture
def echo(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The ``echo`` provider registered for one test, and forgotten after it."""
    monkeypatch.setattr(providers, "_providers", dict(providers._providers))
    OPENED.clear()
    register(SpecProvider("echo", _open_echo, "'echo:MODEL'", needs_model=True))
    yield
    OPENED.clear()


@pytest.mark.usefixtures("echo")
async def test_a_registered_provider_is_named_by_strings_wherever_a_model_is_expected() -> None:
    agent = SubAgent(name="e", prompt="say {{x}}", llm="echo:parrot")
    assert isinstance(agent.llm, LLMSpec)
    assert (agent.llm.model_name, agent.llm.provider_name) == ("parrot", "echo")
    step = await agent.run({"x": "hi"})
    assert step.output == "parrot heard say hi"
    # Built once unchecked (every value but the key), then one adapter per call, closed.
    assert [(a.check_key, a.closed) for a in OPENED] == [(False, False), (True, True)]
    assert pickle.loads(pickle.dumps(agent.llm)).spec == "echo:parrot"


@pytest.mark.usefixtures("echo")
def test_the_forms_a_bad_string_is_told_list_each_registered_text_once() -> None:
    with pytest.raises(ConfigurationError) as caught:
        parse_subagent_llm("tgi:model", field="llm")
    message = caught.value.message
    assert message.startswith("expected 'openai:MODEL', 'openai:MODEL@BASE_URL' or ")
    assert message.count("'lmstudio:'") == 1  # five providers of one adapter, one text
    assert message.endswith(", or 'echo:MODEL', got 'tgi:model'")
    with pytest.raises(ConfigurationError, match=r"^llm: echo needs a model"):
        SubAgent(name="e", prompt="p", llm="echo:@https://echo.example/api")


def test_a_provider_name_must_be_a_lower_case_prefix() -> None:
    for name in ("", "Echo", "e:cho"):
        with pytest.raises(ConfigurationError, match=r"^provider\.name: "):
            register(SpecProvider(name, _open_echo, "'x:MODEL'"))


@pytest.mark.usefixtures("echo")
def test_openai_chat_refuses_a_subagent_llm_of_a_provider_it_does_not_serve() -> None:
    with pytest.raises(ConfigurationError) as caught:
        OpenAIChat.from_env({"SUBAGENT_LLM": "echo:parrot"})
    assert caught.value.field == "SUBAGENT_LLM"
    assert "names a model of echo, which OpenAIChat does not serve" in caught.value.message


@pytest.mark.usefixtures("echo")
async def test_open_llm_opens_one_adapter_with_its_key_checked() -> None:
    llm = open_llm("echo:parrot@https://echo.example/v9")
    assert isinstance(llm, EchoChat) and llm.check_key
    assert llm.base_url == "https://echo.example/v9"
    with pytest.raises(ConfigurationError, match=r"^--llm: expected "):
        open_llm("parrot", field="--llm")


@pytest.mark.usefixtures("echo")
async def test_the_command_line_names_and_closes_any_adapter_by_what_it_has(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SUBAGENT_LLM", "echo:parrot@https://user:hunter2@echo.example/v9?k=s")
    agent = SubAgent(name="e", prompt="p")
    args = argparse.Namespace(llm=None, local_model=None)
    with chosen_model(agent, args) as llm:
        async with opened(llm):
            assert isinstance(llm, EchoChat) and not llm.closed
        assert llm.closed
    err = capsys.readouterr().err
    assert err.strip() == "model: parrot at https://echo.example/v9 (SUBAGENT_LLM)"
    # A model without base_url or aclose: its name, and nothing to close.
    plain: Any = type("Plain", (), {"model_name": "m"})()
    assert describe_model(plain) == "m"
    async with opened(plain):
        pass
