from typing import Any

import pytest

from subagent import (
    ConfigurationError,
    FailReason,
    Message,
    ParserContractError,
    ParseResult,
    RunFailedError,
    ScriptedLLM,
    SubAgentError,
    ThinkError,
    multi_section_parser,
    sections_parser,
    think_with_retry,
)

pytestmark = pytest.mark.anyio

HEADERS = ["[Plan]", "[Timeline]"]
GOOD = "[Plan]\nread\n[Timeline]\n2 weeks"


async def test_a_reply_that_parses_returns_its_sections() -> None:
    llm = ScriptedLLM([GOOD])
    result = await think_with_retry(llm, "Plan it.", multi_section_parser, section_headers=HEADERS)
    assert result == {"[Plan]": "read", "[Timeline]": "2 weeks"}
    assert len(llm.requests) == 1
    (_, task) = llm.requests[0].messages  # the final-turn notice joins the task
    assert task.role == "user" and task.content.startswith("Plan it.\n\nIMPORTANT: ")


async def test_data_is_returned_when_the_parser_has_no_sections() -> None:
    def seed_parser(text: str) -> dict[str, Any]:
        if "[Plan]" not in text:
            return {"status": "error", "feedback": "Missing [Plan] section."}
        return {"status": "success", "data": text.split("[Plan]")[1].strip()}

    llm = ScriptedLLM(["no plan", "[Plan]\nthe plan"])
    assert await think_with_retry(llm, "Plan it.", seed_parser) == "the plan"
    assert "Missing [Plan] section." in llm.requests[1].messages[-1].content


async def test_a_failed_parse_is_fed_back_and_the_correction_returned() -> None:
    llm = ScriptedLLM(["[Plan]\nread", GOOD])
    result = await think_with_retry(llm, "Plan it.", sections_parser(HEADERS))
    assert result == {"[Plan]": "read", "[Timeline]": "2 weeks"}
    second = llm.requests[1].messages
    assert second[-2] == Message(role="assistant", content="[Plan]\nread")
    assert second[-1].role == "user"
    assert "- [Timeline]" in second[-1].content


async def test_max_corrections_counts_corrections_after_the_first_attempt() -> None:
    llm = ScriptedLLM(["a", "b", "c", GOOD])
    with pytest.raises(ThinkError) as info:
        await think_with_retry(llm, "Plan it.", sections_parser(HEADERS), max_corrections=2)
    assert len(llm.requests) == 3
    error = info.value
    assert isinstance(error, RunFailedError)
    assert isinstance(error, SubAgentError)
    assert error.reason is FailReason.BUDGET_EXHAUSTED
    assert "after 3 attempts" in str(error)
    assert [turn.reply for turn in error.attempts] == ["a", "b", "c"]
    assert error.step is not None
    assert error.step.turns == error.attempts
    assert error.turns == tuple(error.attempts)


async def test_every_attempt_records_its_reply_and_feedback() -> None:
    llm = ScriptedLLM(["[Plan]\nx", "[Timeline]\ny"])
    with pytest.raises(ThinkError) as info:
        await think_with_retry(llm, "Plan it.", sections_parser(HEADERS), max_corrections=1)
    first, second = info.value.attempts
    assert first.reply == "[Plan]\nx"
    assert first.feedback is not None
    assert "- [Timeline]" in first.feedback
    assert second.reply == "[Timeline]\ny"
    assert second.error is not None
    assert "- [Plan]" in second.error


async def test_no_correction_means_one_attempt() -> None:
    llm = ScriptedLLM(["wrong"])
    with pytest.raises(ThinkError, match="after 1 attempt "):
        await think_with_retry(llm, "Plan it.", sections_parser(HEADERS), max_corrections=0)
    assert len(llm.requests) == 1


async def test_corrections_collapse_older_failed_attempts() -> None:
    llm = ScriptedLLM(["first miss", "second miss", GOOD])
    await think_with_retry(llm, "Plan it.", sections_parser(HEADERS), max_corrections=2)
    second, third = llm.requests[1].messages, llm.requests[2].messages
    assert len(third) == len(second)
    assert all(message.content != "first miss" for message in third)
    assert any(message.content == "second miss" for message in third)


async def test_messages_may_be_a_conversation_of_dicts_or_messages() -> None:
    llm = ScriptedLLM([GOOD])
    conversation = [
        {"role": "user", "content": "Context: a study of tea."},
        {"role": "assistant", "content": "Understood."},
        Message(role="user", content="Now plan it."),
    ]
    await think_with_retry(llm, conversation, sections_parser(HEADERS))
    contents = [message.content for message in llm.requests[0].messages]
    assert contents[1:3] == ["Context: a study of tea.", "Understood."]
    assert len(contents) == 4 and contents[3].startswith("Now plan it.\n\nIMPORTANT: ")


async def test_parser_instructions_go_into_the_system_prompt() -> None:
    llm = ScriptedLLM([GOOD])
    parser = sections_parser(HEADERS)
    await think_with_retry(llm, "Plan it.", parser)
    system = llm.requests[0].messages[0]
    assert system.role == "system"
    assert parser.instructions in system.content


async def test_an_explicit_fail_is_corrected_like_any_reply_that_does_not_parse() -> None:
    llm = ScriptedLLM(['{"fail": "no data about tea"}', GOOD])
    result = await think_with_retry(llm, "Plan it.", sections_parser(HEADERS))
    assert set(result) == set(HEADERS)
    assert len(llm.requests) == 2
    assert '{"fail"' not in (llm.requests[0].messages[0].content or "")


async def test_a_parser_that_raises_is_a_contract_error_carrying_its_turns() -> None:
    def broken(text: str) -> ParseResult:
        if text == "first":
            return ParseResult.error("Say 'second'.")
        raise IndexError("oops")

    with pytest.raises(ParserContractError, match="IndexError") as info:
        await think_with_retry(ScriptedLLM(["first", "second"]), "Go.", broken)
    assert isinstance(info.value.__cause__, IndexError)
    assert [turn.reply for turn in info.value.turns] == ["first", "second"]


@pytest.mark.parametrize("max_corrections", [-1, True, 1.5, "3"])
async def test_invalid_max_corrections_is_rejected_before_any_call(max_corrections: Any) -> None:
    llm = ScriptedLLM([GOOD])
    with pytest.raises(ConfigurationError, match=r"^max_corrections: "):
        await think_with_retry(
            llm, "Plan it.", sections_parser(HEADERS), max_corrections=max_corrections
        )
    assert llm.requests == []


async def test_the_default_is_two_corrections_three_attempts() -> None:
    llm = ScriptedLLM(["a", "b", "c", GOOD])
    with pytest.raises(ThinkError, match="after 3 attempts"):
        await think_with_retry(llm, "Plan it.", sections_parser(HEADERS))


async def test_max_retries_is_deprecated_and_still_counts_total_attempts() -> None:
    llm = ScriptedLLM(["a", "b", GOOD])
    with (
        pytest.warns(DeprecationWarning, match=r"max_corrections=N - 1") as caught,
        pytest.raises(ThinkError, match="after 2 attempts"),
    ):
        await think_with_retry(llm, "Plan it.", sections_parser(HEADERS), max_retries=2)
    assert caught[0].filename == __file__
    assert len(llm.requests) == 2


async def test_max_retries_given_positionally_keeps_its_meaning_and_warns() -> None:
    llm = ScriptedLLM(["a", GOOD])
    with pytest.warns(DeprecationWarning, match="max_corrections"):
        assert await think_with_retry(llm, "Plan it.", sections_parser(HEADERS), 2) is not None
    assert len(llm.requests) == 2


@pytest.mark.parametrize("max_retries", [0, -1, True, 1.5, "3"])
async def test_an_invalid_deprecated_max_retries_is_rejected_naming_it(max_retries: Any) -> None:
    llm = ScriptedLLM([GOOD])
    with (
        pytest.warns(DeprecationWarning, match="max_corrections"),
        pytest.raises(ConfigurationError, match=r"^max_retries"),
    ):
        await think_with_retry(llm, "Plan it.", sections_parser(HEADERS), max_retries=max_retries)
    assert llm.requests == []


async def test_both_spellings_at_once_are_refused() -> None:
    with (
        pytest.warns(DeprecationWarning, match="max_corrections"),
        pytest.raises(ConfigurationError, match="not both"),
    ):
        await think_with_retry(
            ScriptedLLM([]), "Plan it.", sections_parser(HEADERS), max_retries=2, max_corrections=1
        )
