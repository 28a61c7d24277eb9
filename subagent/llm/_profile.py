"""What an OpenAI-compatible server can do: model profiles, and how one is found.

A :class:`ModelProfile` says which structured-output dialect a server speaks, whether it
honours a forced (named) ``tool_choice``, whether it returns tool calls natively, and whether
calls written as text should be read. :class:`~subagent.llm.OpenAIChat` takes one explicitly,
from the model string's provider (``vllm:...``), from the host (OpenAI's own API), or finds it
out once per (base URL, model) by asking the server's ``GET /models`` (:func:`identify`),
and remembers it for the process (:data:`PROFILE_CACHE_SIZE` entries at most).

No I/O happens here: the adapter asks, this module reads the answer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal, get_args

from subagent._errors import ConfigurationError
from subagent.llm._protocol import OutputRequest, UnsupportedOutputError

__all__ = [
    "LLAMA_CPP",
    "LLAMA_CPP_PYTHON",
    "LMSTUDIO",
    "OLLAMA",
    "OPENAI",
    "OPENAI_COMPATIBLE",
    "PROFILES",
    "PROFILE_CACHE_SIZE",
    "VLLM",
    "ModelProfile",
    "StructuredOutput",
    "check_output",
    "forget_profiles",
    "identify",
    "profile_named",
    "remember",
    "remembered",
]

StructuredOutput = Literal["json_schema", "json_object", "guided_json", "structured_outputs"]
"""How a server takes a JSON schema for its structured output:

- ``json_schema``: OpenAI's ``response_format: {"type": "json_schema", "json_schema":
  {"name", "schema", "strict"}}`` (OpenAI, vLLM, Ollama, LM Studio, llama.cpp's server).
- ``json_object``: ``response_format: {"type": "json_object", "schema": ...}``
  (llama-cpp-python's only form; llama.cpp's server takes it too).
- ``guided_json``: vLLM's ``guided_json: <schema>`` (removed in vLLM 0.12).
- ``structured_outputs``: vLLM's ``structured_outputs: {"json": <schema>}`` (its newer form).
"""

_DIALECTS: Final = frozenset(get_args(StructuredOutput))


@dataclass(frozen=True, slots=True)
class ModelProfile:
    """What a server (and the model it serves) can do with a request.

    Attributes:
        name: The profile's name, shown in errors (``"vllm"``, ``"llama-cpp-python"``...).
        structured_output: The dialect its structured output takes (see
            :data:`StructuredOutput`); ``None`` when it has none: output mode
            ``json_schema`` is refused.
        forced_tool: Whether it honours a named ``tool_choice`` (``{"type": "function",
            "function": {"name": ...}}``); when it does not, output mode ``tool`` is refused.
        native_tool_calls: Whether calls come back as ``tool_calls`` when tools are offered
            under ``auto``; for callers choosing a protocol (``react`` where it is ``False``),
            the adapter itself does not act on it.
        text_tool_calls: Whether the adapter reads tool calls written as text (the default
            of ``OpenAIChat(text_tool_calls=...)``).

    Raises:
        ConfigurationError: A value is invalid; the message names the field.
    """

    name: str
    structured_output: StructuredOutput | None = "json_schema"
    forced_tool: bool = True
    native_tool_calls: bool = True
    text_tool_calls: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ConfigurationError("profile.name", "must be a non-empty string")
        if self.structured_output is not None and self.structured_output not in _DIALECTS:
            raise ConfigurationError(
                "profile.structured_output",
                f"must be one of {sorted(_DIALECTS)} or None, got {self.structured_output!r}",
            )
        for field in ("forced_tool", "native_tool_calls", "text_tool_calls"):
            if not isinstance(getattr(self, field), bool):
                raise ConfigurationError(f"profile.{field}", "must be True or False")


OPENAI: Final = ModelProfile("openai")
"""OpenAI's own API: ``json_schema`` with ``strict``, forced tools, native calls."""

OPENAI_COMPATIBLE: Final = ModelProfile("openai-compatible", text_tool_calls=True)
"""A server that speaks OpenAI's API and could not be identified: taken to follow the API
(``json_schema``, forced tools), with calls written as text read too."""

LLAMA_CPP_PYTHON: Final = ModelProfile(
    "llama-cpp-python", structured_output="json_object", native_tool_calls=False,
    text_tool_calls=True,
)  # fmt: skip
"""llama-cpp-python's server (0.3.x): ``json_object`` with a schema (its request model
refuses ``json_schema``); a named ``tool_choice`` gives a grammar-constrained native call;
under ``auto``, its default chat format returns the model's calls as text."""

LLAMA_CPP: Final = ModelProfile(
    "llama.cpp", structured_output="json_object", forced_tool=False, text_tool_calls=True
)
"""llama.cpp's ``llama-server``: ``json_object`` with a schema (``json_schema`` too); a named
``tool_choice`` is not enforced (it falls back to ``auto``); native calls with ``--jinja``."""

VLLM: Final = ModelProfile("vllm", text_tool_calls=True)
"""vLLM: OpenAI's ``json_schema`` (every version with structured output takes it; give a
profile with ``guided_json`` or ``structured_outputs`` for vLLM's own fields), named tool
calls; native calls with ``--enable-auto-tool-choice`` and a tool parser."""

OLLAMA: Final = ModelProfile("ollama", forced_tool=False, text_tool_calls=True)
"""Ollama's ``/v1``: ``json_schema`` (0.5 and later); ``tool_choice`` is ignored."""

LMSTUDIO: Final = ModelProfile("lmstudio", forced_tool=False, text_tool_calls=True)
"""LM Studio: ``json_schema`` (not ``json_object``); a named ``tool_choice`` is not
documented, so it is not relied on."""

PROFILES: Final[Mapping[str, ModelProfile]] = {
    profile.name: profile
    for profile in (OPENAI, OPENAI_COMPATIBLE, LLAMA_CPP_PYTHON, LLAMA_CPP, VLLM, OLLAMA, LMSTUDIO)
}
"""The known profiles by name (``OpenAIChat(profile="vllm")``)."""


def profile_named(value: ModelProfile | str, *, field: str = "profile") -> ModelProfile:
    """``value`` itself, or the known profile it names.

    Raises:
        ConfigurationError: Naming ``field``: the name is not a known profile's, or the
            value is neither a name nor a :class:`ModelProfile`.
    """
    if isinstance(value, ModelProfile):
        return value
    if isinstance(value, str) and value in PROFILES:
        return PROFILES[value]
    raise ConfigurationError(
        field, f"expected a ModelProfile or one of {sorted(PROFILES)}, got {value!r}"
    )


# -- finding a profile out --------------------------------------------------------------------

# What GET /models says in each entry's owned_by, for the servers that say something of
# their own (OpenAI's API answers "openai" or "system", but its host already tells).
_OWNERS: Final[Mapping[str, ModelProfile]] = {
    "me": LLAMA_CPP_PYTHON,  # llama_cpp/server/app.py: get_models
    "llamacpp": LLAMA_CPP,
    "vllm": VLLM,
    "library": OLLAMA,  # Ollama's own models; pulled ones name their namespace
    "organization_owner": LMSTUDIO,
}


def identify(body: str, model: str | None) -> ModelProfile:
    """The profile a ``GET /models`` answer points to; :data:`OPENAI_COMPATIBLE` if none.

    Reads the ``owned_by`` of the entry whose ``id`` is ``model`` (else of the first entry).
    An answer of any other shape identifies nothing.
    """
    try:
        data = json.loads(body).get("data")
        entries = [entry for entry in data if isinstance(entry, dict)]
    except (ValueError, TypeError, AttributeError, RecursionError):
        return OPENAI_COMPATIBLE
    chosen = next((entry for entry in entries if entry.get("id") == model), None)
    if chosen is None and entries:
        chosen = entries[0]
    owner = chosen.get("owned_by") if chosen is not None else None
    return _OWNERS.get(owner, OPENAI_COMPATIBLE) if isinstance(owner, str) else OPENAI_COMPATIBLE


PROFILE_CACHE_SIZE: Final = 256
"""Servers (base URL and model) whose found-out profile a process remembers; past it, the
oldest is forgotten (and asked again if used again)."""

_found: dict[tuple[str, str | None], ModelProfile] = {}


def remembered(base_url: str, model: str | None) -> ModelProfile | None:
    """The profile found out for this server and model, if it was."""
    return _found.get((base_url, model))


def remember(base_url: str, model: str | None, profile: ModelProfile) -> None:
    """Remember what was found out for this server and model (bounded, oldest out first)."""
    key = (base_url, model)
    _found.pop(key, None)
    while len(_found) >= PROFILE_CACHE_SIZE:
        del _found[next(iter(_found))]
    _found[key] = profile


def forget_profiles() -> None:
    """Forget every profile found out (the next request that needs one asks again)."""
    _found.clear()


# -- what a profile refuses -----------------------------------------------------------------


def check_output(output: OutputRequest, profile: ModelProfile, server: str) -> None:
    """Refuse an output mode ``profile`` cannot serve.

    Raises:
        UnsupportedOutputError: Naming the mode, ``server`` and why.
    """
    if output.mode == "json_schema" and profile.structured_output is None:
        raise UnsupportedOutputError(
            output.mode, server, "it has no structured output; ask in the prompt (mode 'text')"
        )
    if output.mode == "tool" and not profile.forced_tool:
        raise UnsupportedOutputError(
            output.mode, server,
            "it does not enforce a named tool_choice; use mode 'json_schema' or 'text'",
        )  # fmt: skip
