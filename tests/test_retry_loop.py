from typing import Any

import anyio
import pytest
from opentelemetry import trace
from opentelemetry.trace import StatusCode
from support import Traced, attrs, set_capture

from subagent import ConfigurationError, ParserContractError
from subagent.parsers._validation import Validation
from subagent.patterns._retry_loop import CorrectionError, RetryLoop, RetryLoopResult, retry_loop

pytestmark = pytest.mark.anyio


def at_least(n: int) -> Any:
    """A validator: the value (an int) must be >= n."""

    def check(value: int) -> Validation:
        return Validation.ok() if value >= n else Validation.fail(f"{value} is below {n}")

    return check


class Corrector:
    """Adds one per call and records what it was given."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, tuple[str, ...]]] = []

    def __call__(self, value: int, errors: tuple[str, ...]) -> int:
        self.calls.append((value, errors))
        return value + 1


async def test_a_valid_value_is_returned_without_correction() -> None:
    correct = Corrector()
    result = await retry_loop(5, at_least(3), correct)
    assert result == RetryLoopResult(valid=True, value=5, count=0, errors=(), exhausted=False)
    assert correct.calls == []


async def test_an_invalid_value_is_corrected_then_revalidated() -> None:
    correct = Corrector()
    result = await retry_loop(2, at_least(3), correct, max_corrections=2)
    assert result.valid
    assert result.value == 3
    assert result.count == 1
    assert result.errors == ()
    assert not result.exhausted
    assert correct.calls == [(2, ("2 is below 3",))]


async def test_the_loop_stops_after_max_corrections_corrections() -> None:
    correct = Corrector()
    result = await retry_loop(0, at_least(10), correct, max_corrections=3)
    assert not result.valid
    assert result.exhausted
    assert result.count == 3
    assert result.value == 3
    assert result.errors == ("3 is below 10",)
    assert result.error is None
    assert [value for value, _ in correct.calls] == [0, 1, 2]


async def test_zero_retries_only_validates() -> None:
    correct = Corrector()
    result = await retry_loop(0, at_least(1), correct, max_corrections=0)
    assert (result.valid, result.exhausted, result.count) == (False, True, 0)
    assert correct.calls == []


async def test_async_validate_and_correct_are_awaited() -> None:
    async def validate(value: str) -> dict[str, Any]:
        await anyio.lowlevel.checkpoint()
        return {
            "valid": value.endswith("."),
            "errors": [] if value.endswith(".") else ["no period"],
        }

    async def correct(value: str, errors: tuple[str, ...]) -> str:
        await anyio.lowlevel.checkpoint()
        return value + "."

    result = await retry_loop("Hello", validate, correct)
    assert (result.valid, result.value, result.count) == (True, "Hello.", 1)


async def test_several_validators_merge_their_errors() -> None:
    def is_even(value: int) -> Validation:
        return Validation.ok() if value % 2 == 0 else Validation.fail("odd")

    correct = Corrector()
    result = await retry_loop(1, [at_least(4), is_even], correct, max_corrections=3)
    assert correct.calls[0] == (1, ("1 is below 4", "odd"))
    assert (result.valid, result.value, result.count) == (True, 4, 3)


async def test_a_correction_that_raises_ends_the_loop_keeping_the_last_value() -> None:
    def correct(value: int, errors: tuple[str, ...]) -> int:
        if value == 1:
            raise TimeoutError("model unavailable")
        return value + 1

    result = await retry_loop(0, at_least(5), correct, max_corrections=4)
    assert not result.valid
    assert not result.exhausted
    assert result.value == 1
    assert result.count == 1
    assert result.errors == ("1 is below 5",)
    assert result.error == CorrectionError("TimeoutError", "model unavailable", attempt=2)
    assert isinstance(result.error.exception, TimeoutError)
    assert str(result.error) == "correction 2 raised TimeoutError: model unavailable"


async def test_base_exceptions_from_correct_propagate() -> None:
    class Stop(BaseException):
        pass

    def correct(value: int, errors: tuple[str, ...]) -> int:
        raise Stop

    with pytest.raises(Stop):
        await retry_loop(0, at_least(5), correct)


async def test_a_validator_that_raises_is_a_contract_error() -> None:
    def validate(value: int) -> Validation:
        raise ValueError("broken validator")

    with pytest.raises(ParserContractError, match="broken validator"):
        await retry_loop(0, validate, Corrector())


async def test_retry_delay_waits_before_each_correction(monkeypatch: pytest.MonkeyPatch) -> None:
    delays: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        delays.append(seconds)

    monkeypatch.setattr("subagent.patterns._retry_loop.anyio.sleep", fake_sleep)
    await retry_loop(0, at_least(2), Corrector(), max_corrections=5, retry_delay=0.25)
    assert delays == [0.25, 0.25]


async def test_no_delay_means_no_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    async def fail_sleep(seconds: float) -> None:
        raise AssertionError("slept")

    monkeypatch.setattr("subagent.patterns._retry_loop.anyio.sleep", fail_sleep)
    assert (await retry_loop(0, at_least(2), Corrector(), max_corrections=5)).valid


async def test_a_retry_loop_object_is_reusable() -> None:
    loop: RetryLoop[int] = RetryLoop(at_least(3), Corrector(), max_corrections=5)
    assert (await loop.run(0)).count == 3
    assert (await loop.run(7)).count == 0
    assert "max_corrections=5" in repr(loop)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_corrections": -1}, "max_corrections"),
        ({"max_corrections": 1.0}, "max_corrections"),
        ({"max_corrections": True}, "max_corrections"),
        ({"max_corrections": "2"}, "max_corrections"),
        ({"retry_delay": -0.1}, "retry_delay"),
        ({"retry_delay": True}, "retry_delay"),
        ({"retry_delay": float("nan")}, "retry_delay"),
        ({"retry_delay": float("inf")}, "retry_delay"),
        ({"validate": "not callable"}, "validate"),
        ({"validate": []}, "validate"),
        ({"correct": None}, "correct"),
    ],
)
async def test_invalid_arguments_are_rejected_up_front(kwargs: dict[str, Any], field: str) -> None:
    correct = Corrector()
    arguments: dict[str, Any] = {"validate": at_least(1), "correct": correct, **kwargs}
    with pytest.raises(ConfigurationError) as info:
        RetryLoop(**arguments)
    assert info.value.field == field
    with pytest.raises(ConfigurationError):
        await retry_loop(0, **arguments)
    assert correct.calls == []


# --- tracing ------------------------------------------------------------------------------


@pytest.mark.parametrize("capture", [False, True])
async def test_each_validation_and_correction_is_a_span(
    traced: Traced, monkeypatch: pytest.MonkeyPatch, capture: bool
) -> None:
    set_capture(monkeypatch, capture)
    provider, exporter = traced.provider, traced.exporter
    await retry_loop(1, at_least(3), Corrector(), max_corrections=3, tracer_provider=provider)
    finished = exporter.get_finished_spans()
    assert [s.name for s in finished] == [
        "retry_loop.validate",
        "retry_loop.correct",
        "retry_loop.validate",
        "retry_loop.correct",
        "retry_loop.validate",
    ]
    validations = [s for s in finished if s.name == "retry_loop.validate"]
    assert [attrs(s)["subagent.retry_loop.attempt"] for s in validations] == [0, 1, 2]
    assert [attrs(s)["subagent.retry_loop.valid"] for s in validations] == [
        False,
        False,
        True,
    ]
    assert [attrs(s)["subagent.retry_loop.error_count"] for s in validations] == [1, 1, 0]
    assert [s.status.status_code for s in validations] == [
        StatusCode.ERROR,
        StatusCode.ERROR,
        StatusCode.UNSET,
    ]
    # The validator's words (they may quote the value) only with content capture.
    expected = "1 is below 3" if capture else "1 validation error(s)"
    assert validations[0].status.description == expected
    corrections = [s for s in finished if s.name == "retry_loop.correct"]
    assert [attrs(s)["subagent.retry_loop.attempt"] for s in corrections] == [1, 2]
    assert all(s.status.status_code is StatusCode.UNSET for s in corrections)


@pytest.mark.parametrize("capture", [False, True])
async def test_a_failed_correction_span_has_error_status_and_the_exception(
    traced: Traced, monkeypatch: pytest.MonkeyPatch, capture: bool
) -> None:
    set_capture(monkeypatch, capture)
    provider, exporter = traced.provider, traced.exporter

    def correct(value: int, errors: tuple[str, ...]) -> int:
        raise RuntimeError("no model")

    await retry_loop(0, at_least(1), correct, tracer_provider=provider)
    (_validation, correction) = exporter.get_finished_spans()
    assert correction.name == "retry_loop.correct"
    assert correction.status.status_code is StatusCode.ERROR
    assert attrs(correction)["error.type"] == "RuntimeError"
    if capture:
        assert correction.status.description == "RuntimeError: no model"
        assert [event.name for event in correction.events] == ["exception"]
    else:  # the message and the exception event may quote the value
        assert correction.status.description == "RuntimeError"
        assert correction.events == ()


async def test_spans_nest_under_the_callers_span(traced: Traced) -> None:
    provider, exporter = traced.provider, traced.exporter
    with provider.get_tracer("test").start_as_current_span("pipeline") as parent:
        await retry_loop(0, at_least(1), Corrector(), tracer_provider=provider)
    children = [s for s in exporter.get_finished_spans() if s.name != "pipeline"]
    assert len(children) == 3
    assert all(s.parent is not None for s in children)
    assert {s.parent.span_id for s in children if s.parent} == {parent.get_span_context().span_id}


async def test_no_global_tracer_provider_is_installed() -> None:
    before = trace.get_tracer_provider()
    await retry_loop(0, at_least(1), Corrector())
    assert trace.get_tracer_provider() is before


# --- the deprecated spelling ---------------------------------------------------------------


async def test_max_retries_is_deprecated_with_the_same_meaning() -> None:
    with pytest.warns(DeprecationWarning, match="pass max_corrections") as caught:
        result = await retry_loop(0, at_least(10), Corrector(), max_retries=3)
    assert caught[0].filename == __file__
    assert (result.count, result.exhausted) == (3, True)


def test_retry_loop_object_takes_the_deprecated_spelling_too() -> None:
    with pytest.warns(DeprecationWarning, match="max_corrections") as caught:
        loop: RetryLoop[int] = RetryLoop(at_least(3), Corrector(), max_retries=4)
    assert caught[0].filename == __file__
    assert loop.max_corrections == 4
    with pytest.warns(DeprecationWarning, match="read max_corrections"):
        assert loop.max_retries == 4


def test_an_invalid_deprecated_max_retries_is_refused_naming_it() -> None:
    with (
        pytest.warns(DeprecationWarning, match="max_corrections"),
        pytest.raises(ConfigurationError, match=r"^max_retries"),
    ):
        RetryLoop(at_least(3), Corrector(), max_retries=-1)


async def test_both_spellings_at_once_are_refused() -> None:
    with (
        pytest.warns(DeprecationWarning, match="max_corrections"),
        pytest.raises(ConfigurationError, match="not both"),
    ):
        await retry_loop(0, at_least(3), Corrector(), max_corrections=1, max_retries=1)


async def test_the_default_is_one_correction() -> None:
    result = await retry_loop(0, at_least(10), Corrector())
    assert (result.count, result.exhausted) == (1, True)
