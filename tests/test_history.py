"""Chat histories kept between runs (subagent/history.py)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from subagent import ConfigurationError, Message, ScriptedLLM, SubAgent
from subagent.history import ChatHistory, MemoryHistory, SQLiteHistory

pytestmark = pytest.mark.anyio

GUIDE = SubAgent(name="guide", prompt="{{question}}", max_turns=1)


def said(role: str, text: str) -> Message:
    return Message(role=role, content=text)  # type: ignore[arg-type]


@pytest.fixture(params=["memory", "sqlite"])
def history(request: pytest.FixtureRequest, tmp_path: Path) -> ChatHistory:
    if request.param == "memory":
        return MemoryHistory(max_messages=5)
    return SQLiteHistory(tmp_path / "chats.sqlite", max_messages=5)


async def test_a_chat_goes_on_from_its_saved_history_and_sessions_stay_apart(
    history: ChatHistory,
) -> None:
    llm = ScriptedLLM(["Paris.", "Rome.", "About 2.1 million."])
    first = await GUIDE.run({"question": "Capital of France?"}, llm=llm,
                            message_history=history.load("alice"))  # fmt: skip
    history.save("alice", first.messages)
    await GUIDE.run({"question": "Capital of Italy?"}, llm=llm,
                    message_history=history.load("bob"))  # fmt: skip
    second = await GUIDE.run({"question": "How many live there?"}, llm=llm,
                             message_history=history.load("alice"))  # fmt: skip
    sent = [m.content for m in llm.requests[2].messages if m.role != "system"]
    assert sent[:2] == ["Capital of France?", "Paris."]  # alice's, none of bob's
    assert len(sent) == 3 and sent[2].startswith("How many live there?")
    history.save("alice", second.messages)
    assert [m.content for m in history.load("alice")][-1] == "About 2.1 million."
    assert history.load("carol") == []


def test_a_session_keeps_its_last_messages_and_the_one_that_started_it(
    history: ChatHistory,
) -> None:
    conversation = [said("user" if n % 2 == 0 else "assistant", f"m{n}") for n in range(9)]
    history.save("long", conversation)
    assert [m.content for m in history.load("long")] == ["m0", "m5", "m6", "m7", "m8"]


def test_the_sqlite_rows_have_the_documented_shape_and_processes_share_the_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "chats.sqlite"
    SQLiteHistory(path).save("alice", [said("user", "hi"), said("assistant", "hello")])
    with sqlite3.connect(path) as db:
        session, messages, updated_at = db.execute(
            "SELECT session, messages, updated_at FROM subagent_chat_history"
        ).fetchone()
    assert session == "alice" and updated_at > 0
    assert [m["content"] for m in json.loads(messages)] == ["hi", "hello"]
    assert [m.content for m in SQLiteHistory(path).load("alice")] == ["hi", "hello"]
    SQLiteHistory(path).delete("alice")
    assert SQLiteHistory(path).load("alice") == []


def test_a_history_over_its_byte_bound_is_refused_and_nothing_saved(tmp_path: Path) -> None:
    history = SQLiteHistory(tmp_path / "chats.sqlite", max_bytes=1000)
    history.save("alice", [said("user", "short")])
    with pytest.raises(ConfigurationError, match="over max_bytes=1000; nothing was saved"):
        history.save("alice", [said("user", "x" * 2000)])
    assert [m.content for m in history.load("alice")] == ["short"]


def test_a_row_another_program_broke_is_named_when_loaded(tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite"
    SQLiteHistory(path)
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO subagent_chat_history VALUES ('eve', '{\"not\": 1}', 0)")
    with pytest.raises(ConfigurationError, match=r"session 'eve'.*not a list of messages"):
        SQLiteHistory(path).load("eve")


@pytest.mark.parametrize("session", ["", None, 7])
def test_a_session_id_must_be_a_non_empty_string(session: object) -> None:
    with pytest.raises(ConfigurationError, match="session"):
        MemoryHistory().load(session)  # type: ignore[arg-type]
