"""Which conventions runs follow and where content goes (subagent.observe._semconv)."""

from __future__ import annotations

import pytest
from support import set_semconv

from subagent.observe._semconv import (
    CAPTURE_CONTENT_ENV,
    LATEST,
    PREVIOUS,
    STABILITY_OPT_IN_ENV,
    Capture,
    active_semconv,
    capture_mode,
    refresh_semconv,
    semconv_from,
)


def test_the_previous_conventions_are_the_default() -> None:
    assert semconv_from({}) is PREVIOUS
    assert semconv_from({STABILITY_OPT_IN_ENV: ""}) is PREVIOUS
    assert semconv_from({STABILITY_OPT_IN_ENV: "http,database"}) is PREVIOUS


@pytest.mark.parametrize(
    "value",
    [
        "gen_ai_latest_experimental",
        "http, gen_ai_latest_experimental",
        " GEN_AI_LATEST_EXPERIMENTAL ",
    ],
)
def test_gen_ai_latest_experimental_in_the_opt_in_list_selects_the_latest(value: str) -> None:
    assert semconv_from({STABILITY_OPT_IN_ENV: value}) is LATEST


def test_the_two_versions_name_what_the_latest_conventions_renamed() -> None:
    assert (PREVIOUS.cache_write_tokens, LATEST.cache_write_tokens) == (
        "gen_ai.usage.cache_creation.input_tokens",
        "gen_ai.usage.cache_write.input_tokens",
    )
    assert (PREVIOUS.inference_duration, LATEST.inference_duration) == (
        "gen_ai.client.operation.duration",
        "gen_ai.client.inference.duration",
    )
    assert (PREVIOUS.invocation_duration, LATEST.invocation_duration) == (
        "gen_ai.invoke_agent.duration",
        "gen_ai.invocation.duration",
    )
    assert (PREVIOUS.token_usage, LATEST.token_usage) == ("gen_ai.client.token.usage", None)


def test_the_choice_is_made_once_and_made_again_only_when_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    set_semconv(monkeypatch, None)
    assert active_semconv() is PREVIOUS
    monkeypatch.setenv(STABILITY_OPT_IN_ENV, "gen_ai_latest_experimental")
    assert active_semconv() is PREVIOUS  # not read again per run or per span
    assert refresh_semconv() is LATEST
    assert active_semconv() is LATEST  # (set_semconv's monkeypatch puts the choice back)


@pytest.mark.parametrize(
    ("value", "mode"),
    [
        (None, Capture.NO_CONTENT),
        ("", Capture.NO_CONTENT),
        ("false", Capture.NO_CONTENT),
        ("maybe", Capture.NO_CONTENT),
        ("true", Capture.SPAN_ONLY),
        ("1", Capture.SPAN_ONLY),
        ("YES", Capture.SPAN_ONLY),
        ("NO_CONTENT", Capture.NO_CONTENT),
        ("SPAN_ONLY", Capture.SPAN_ONLY),
        ("event_only", Capture.EVENT_ONLY),
        (" Span_And_Event ", Capture.SPAN_AND_EVENT),
    ],
)
def test_capture_modes_of_the_content_variable(value: str | None, mode: Capture) -> None:
    environ = {} if value is None else {CAPTURE_CONTENT_ENV: value}
    assert capture_mode(environ) is mode


def test_each_capture_mode_says_where_content_goes() -> None:
    where = {mode: (mode.on_spans, mode.on_events) for mode in Capture}
    assert where == {
        Capture.NO_CONTENT: (False, False),
        Capture.SPAN_ONLY: (True, False),
        Capture.EVENT_ONLY: (False, True),
        Capture.SPAN_AND_EVENT: (True, True),
    }
