"""Collapse and accumulate policies of the conversation."""

from __future__ import annotations

from subagent import Message, ToolCall
from subagent._conversation import Conversation, quoted_attempt, with_notice

OPENING = [Message(role="user", content="task")]


def attempt(n: int) -> tuple[Message, Message]:
    return Message(role="assistant", content=f"try {n}"), Message(role="user", content=f"fix {n}")


def test_collapse_keeps_only_the_latest_failed_attempt() -> None:
    conversation = Conversation("collapse", OPENING)
    for n in range(1, 4):
        conversation.add_failed_attempt(*attempt(n))
    assert [m.content for m in conversation.messages()] == ["task", "try 3", "fix 3"]
    assert conversation.collapsed == 4


def test_accumulate_keeps_every_attempt() -> None:
    conversation = Conversation("accumulate", OPENING)
    for n in range(1, 3):
        conversation.add_failed_attempt(*attempt(n))
    assert [m.content for m in conversation.messages()] == ["task", "try 1", "fix 1", "try 2",
                                                           "fix 2"]  # fmt: skip
    assert conversation.collapsed == 0


def test_an_exchange_ends_the_streak_and_keeps_its_latest_attempt() -> None:
    conversation = Conversation("collapse", OPENING)
    conversation.add_failed_attempt(*attempt(1))
    conversation.add_failed_attempt(*attempt(2))
    conversation.add_exchange([Message(role="tool", content="result", tool_call_id="c")])
    conversation.add_failed_attempt(*attempt(3))
    conversation.add_failed_attempt(*attempt(4))
    contents = [m.content for m in conversation.messages()]
    assert contents == ["task", "try 2", "fix 2", "result", "try 4", "fix 4"]
    assert conversation.collapsed == 4


def test_a_notice_joins_the_user_message_it_follows() -> None:
    notice = Message(role="user", content="final turn")
    merged = with_notice([Message(role="system", content="s"), *OPENING], notice)
    assert [(m.role, m.content) for m in merged] == [
        ("system", "s"),
        ("user", "task\n\nfinal turn"),
    ]


def test_a_joined_notice_is_the_message_validation_would_build() -> None:
    task = Message(role="user", content="task", name="alice")
    (merged,) = with_notice([task], Message(role="user", content="final turn"))
    validated = Message(role="user", content="task\n\nfinal turn", name="alice")
    assert merged == validated
    assert merged.model_dump() == validated.model_dump()
    assert merged.model_fields_set == {"role", "content", "name"}
    assert Message.model_validate_json(merged.model_dump_json()) == merged
    assert task.content == "task"  # the task's own message is left as it was


def test_a_notice_after_tool_results_stays_a_message_of_its_own() -> None:
    notice = Message(role="user", content="final turn")
    result = Message(role="tool", content="result", tool_call_id="c")
    assert with_notice([result], notice) == [result, notice]
    assert with_notice([], notice) == [notice]


def test_quote_sends_the_latest_failed_reply_inside_its_feedback() -> None:
    conversation = Conversation("quote", OPENING)
    for n in range(1, 3):
        conversation.add_failed_attempt(*attempt(n))
    messages = conversation.messages()
    assert [m.role for m in messages] == ["user", "user"]
    assert messages[1].content == "Your previous reply was:\n```\ntry 2\n```\n\nfix 2"
    assert conversation.collapsed == 1


def test_quote_writes_a_failed_replys_tool_calls_as_json_in_a_fence_it_cannot_close() -> None:
    reply = Message(role="assistant", content="``` x",
                    tool_calls=(ToolCall(name="f", arguments={"a": 1}, id="c"),))  # fmt: skip
    quoted = quoted_attempt(reply, Message(role="user", content="no tools now"))
    assert quoted.content == (
        'Your previous reply was:\n````\n``` x\n[{"name": "f", "arguments": {"a": 1}}]\n````'
        "\n\nno tools now"
    )


def test_a_kept_reply_is_the_message_validation_would_build() -> None:
    from subagent import LLMResponse
    from subagent.protocols import PROTOCOLS

    for name, protocol in PROTOCOLS.items():
        reply = protocol.failed_reply(LLMResponse(text="an answer \ud800"))
        validated = Message(role="assistant", content="an answer \ufffd")
        assert reply == validated, name
        assert reply.model_fields_set == validated.model_fields_set == {"role", "content"}
        assert Message.model_validate_json(reply.model_dump_json()) == reply
