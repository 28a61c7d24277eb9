"""Secrets an adapter sends, kept out of the text a server sends back.

A server may echo the ``Authorization`` header in an error (OpenAI's "Incorrect API key
provided: ..." does, gateways and proxies too). :class:`Redactor` knows the adapter's secrets
and replaces every exact occurrence in server text with :data:`REDACTED` before the text is
stored anywhere: in an :class:`~subagent.LLMError` (so in a failed Step, its summary, its
JSON, transport-retry records and span statuses) and in a reply.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from subagent._errors import LLMError
from subagent.llm._protocol import LLMResponse, ToolCall

__all__ = [
    "MIN_SECRET_LENGTH",
    "REDACTED",
    "SECRET_HEADERS",
    "Redactor",
    "redact_url_credentials",
]

REDACTED: Final = "[REDACTED]"
"""What a secret is replaced with."""

MIN_SECRET_LENGTH: Final = 8
"""Shorter values are not redacted: replacing ``"local"`` in every reply would corrupt them."""

SECRET_HEADERS: Final = frozenset({"authorization", "proxy-authorization", "api-key", "x-api-key"})
"""Request headers (lower case) whose values are secrets."""


_URL_USERINFO: Final = re.compile(r"(?<=//)[^/?#\s@]*@")


def redact_url_credentials(text: str) -> str:
    """``text`` with the credentials of every URL in it (``//user:password@``) replaced.

    Used on what the adapter itself shows (a configuration error quoting a ``base_url``),
    where the credentials may be too short for :class:`Redactor`, or not yet known.
    """
    return _URL_USERINFO.sub(f"{REDACTED}@", text)


class Redactor:
    """Replaces an adapter's secrets in server text with :data:`REDACTED`.

    Each secret is matched as sent and in its JSON-escaped form; a header value with an
    auth scheme (``Bearer sk-...``, ``Basic ...``) is matched by its credentials, so
    ``Bearer <key>`` becomes ``Bearer [REDACTED]``.

    Args:
        secrets: The API key and secret header values (``None`` and short values are
            skipped, see :data:`MIN_SECRET_LENGTH`).
    """

    __slots__ = ("_forms",)

    def __init__(self, secrets: Iterable[str | None]):
        forms: set[str] = set()
        for secret in secrets:
            if not secret:
                continue
            value = secret.strip()
            scheme, _, credentials = value.partition(" ")
            if credentials.strip() and scheme.isalpha():
                value = credentials.strip()
            if len(value) < MIN_SECRET_LENGTH:
                continue
            forms.add(value)
            forms.add(json.dumps(value)[1:-1])  # as it appears inside a JSON string
        # Longest first, so a secret containing another is replaced whole.
        self._forms = tuple(sorted(forms, key=len, reverse=True))

    @classmethod
    def for_request(
        cls, api_key: str | None, *headers: Mapping[str, str], extra: Iterable[str] = ()
    ) -> Redactor:
        """A redactor for ``api_key``, the secret headers among ``headers``, and ``extra``.

        ``extra`` holds other secrets sent, such as the user name and password of a
        ``base_url`` (decoded and as written in the URL).
        """
        values = [
            value
            for mapping in headers
            for name, value in mapping.items()
            if name.lower() in SECRET_HEADERS
        ]
        return cls([api_key, *values, *extra])

    def __bool__(self) -> bool:
        return bool(self._forms)

    def text(self, text: str) -> str:
        """``text`` with every secret replaced."""
        for form in self._forms:
            if form in text:
                text = text.replace(form, REDACTED)
        return text

    def error(self, error: LLMError) -> LLMError:
        """Redact ``error``'s message and body in place (no unredacted copy is left); return it."""
        if self._forms:
            body = None if error.body is None else self.text(error.body)
            error._replace_text(self.text(error.message), body)
        return error

    def response(self, response: LLMResponse) -> LLMResponse:
        """``response`` with its text, reasoning, tool calls and model name redacted."""
        if not self._forms:
            return response
        update: dict[str, Any] = {}
        for name in ("text", "reasoning", "raw_stop_reason", "model"):
            value = getattr(response, name)
            if value and (redacted := self.text(value)) != value:
                update[name] = redacted
        calls = [self._call(call) for call in response.tool_calls]
        if any(new is not old for new, old in zip(calls, response.tool_calls, strict=True)):
            update["tool_calls"] = calls
        return response.model_copy(update=update) if update else response

    def _call(self, call: ToolCall) -> ToolCall:
        update = {
            name: redacted
            for name, value in (
                ("name", call.name),
                ("id", call.id),
                ("arguments", call.arguments),
            )
            if (redacted := self._value(value)) != value
        }
        return call.model_copy(update=update) if update else call

    def _value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self._value(key): self._value(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self._value(item) for item in value]
        return value
