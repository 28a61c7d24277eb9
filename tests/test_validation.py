import functools
from typing import Any

import anyio
import pytest

from subagent import ParserContractError
from subagent.parsers._validation import (
    Validation,
    callable_name,
    coerce_validation,
    run_validators,
)

# --- Validation ---------------------------------------------------------------------------


def test_ok_and_fail_build_verdicts() -> None:
    assert Validation.ok() == Validation(True, ())
    assert Validation.fail("a", "b") == Validation(False, ("a", "b"))


def test_a_failed_validation_must_say_why() -> None:
    with pytest.raises(ValueError, match="at least one error"):
        Validation.fail()


def test_a_valid_validation_cannot_carry_errors() -> None:
    with pytest.raises(ValueError, match="cannot carry errors"):
        Validation(True, ("oops",))


def test_validation_fields_are_type_checked() -> None:
    with pytest.raises(TypeError, match="valid"):
        Validation(1, ())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="errors"):
        Validation(False, ["a"])  # type: ignore[arg-type]


def test_validation_is_frozen() -> None:
    verdict = Validation.ok()
    with pytest.raises(AttributeError):
        verdict.valid = False  # type: ignore[misc]


# --- coerce_validation --------------------------------------------------------------------


def test_coerce_passes_a_validation_through() -> None:
    verdict = Validation.fail("x")
    assert coerce_validation(verdict, "v") is verdict


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"valid": True}, Validation.ok()),
        ({"valid": True, "errors": []}, Validation.ok()),
        ({"valid": True, "errors": None}, Validation.ok()),
        ({"valid": False, "errors": ["too short"]}, Validation.fail("too short")),
        (
            {"valid": False, "errors": [{"message": "bad"}, "worse"]},
            Validation.fail("bad", "worse"),
        ),
        (
            {"valid": False, "errors": [{"field": "name", "message": "empty"}]},
            Validation.fail("name: empty"),
        ),
        (
            {"valid": False, "errors": ({"location": "a.0", "message": "neg"},)},
            Validation.fail("a.0: neg"),
        ),
    ],
)
def test_coerce_accepts_the_dict_form(raw: dict[str, Any], expected: Validation) -> None:
    assert coerce_validation(raw, "v") == expected


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        (True, "returned bool"),
        (None, "returned NoneType"),
        ({"errors": ["x"]}, "'valid' = None"),
        ({"valid": "yes"}, "'valid' = 'yes'"),
        ({"valid": False, "errors": "too short"}, "'errors' of type str"),
        ({"valid": False, "errors": {"message": "x"}}, "'errors' of type dict"),
        ({"valid": False, "errors": 3}, "'errors' of type int"),
        ({"valid": False, "errors": []}, "without any error message"),
        ({"valid": True, "errors": ["x"]}, "valid=True with errors"),
        ({"valid": False, "errors": [{"msg": "x"}]}, "non-empty 'message'"),
        ({"valid": False, "errors": [""]}, "non-empty string"),
        ({"valid": False, "errors": [42]}, "the error 42"),
    ],
)
def test_coerce_rejects_anything_else_naming_the_validator(raw: object, fragment: str) -> None:
    with pytest.raises(ParserContractError, match="check_plan") as info:
        coerce_validation(raw, "check_plan")
    assert fragment in str(info.value)


def test_callable_name_is_readable() -> None:
    def check(x: object) -> Validation:
        return Validation.ok()

    class Checker:
        def __call__(self, x: object) -> Validation:
            return Validation.ok()

    assert callable_name(check).endswith("check")
    assert callable_name(functools.partial(check)) == callable_name(check)
    assert callable_name(Checker()) == "Checker"
    assert callable_name(len) == "len"


# --- run_validators -----------------------------------------------------------------------


@pytest.mark.anyio
async def test_run_validators_with_none_is_ok() -> None:
    assert await run_validators([], "x") == Validation.ok()


@pytest.mark.anyio
async def test_run_validators_merges_every_error_in_order() -> None:
    calls: list[str] = []

    def first(output: str) -> Validation:
        calls.append("first")
        return Validation.fail("a", "b")

    async def second(output: str) -> dict[str, Any]:
        await anyio.lowlevel.checkpoint()
        calls.append("second")
        return {"valid": False, "errors": ["c"]}

    def third(output: str) -> Validation:
        calls.append("third")
        return Validation.ok()

    verdict = await run_validators([first, second, third], "x")
    assert verdict == Validation.fail("a", "b", "c")
    assert calls == ["first", "second", "third"]


@pytest.mark.anyio
async def test_run_validators_passes_the_output_and_awaits_async_ones() -> None:
    seen: list[object] = []

    async def long_enough(output: str) -> Validation:
        seen.append(output)
        return Validation.ok() if len(output) > 3 else Validation.fail("too short")

    assert await run_validators([long_enough], "long text") == Validation.ok()
    assert await run_validators([long_enough], "ab") == Validation.fail("too short")
    assert seen == ["long text", "ab"]


@pytest.mark.anyio
async def test_a_validator_that_raises_is_a_contract_error_naming_it() -> None:
    def check_budget(output: object) -> Validation:
        raise KeyError("budget")

    with pytest.raises(ParserContractError, match="check_budget") as info:
        await run_validators([check_budget], {})
    assert isinstance(info.value.__cause__, KeyError)
    assert "KeyError" in str(info.value)


@pytest.mark.anyio
async def test_an_async_validator_that_raises_is_a_contract_error() -> None:
    async def remote_check(output: object) -> Validation:
        raise RuntimeError("service down")

    with pytest.raises(ParserContractError, match=r"remote_check.*service down"):
        await run_validators([remote_check], {})


@pytest.mark.anyio
async def test_a_validator_returning_garbage_is_a_contract_error_naming_it() -> None:
    def sloppy(output: object) -> bool:
        return True

    with pytest.raises(ParserContractError, match=r"sloppy.*returned bool"):
        await run_validators([sloppy], {})


@pytest.mark.anyio
async def test_base_exceptions_from_validators_propagate_unwrapped() -> None:
    class Stop(BaseException):
        pass

    def stopper(output: object) -> Validation:
        raise Stop

    with pytest.raises(Stop):
        await run_validators([stopper], {})
