"""Chat histories kept between runs: a conversation by session id, to go on from.

A chat is runs that follow each other: each run's ``step.messages`` (the conversation
without the system prompt) is the next run's ``message_history``. A history store keeps
them by session id between requests, processes or restarts::

    history = SQLiteHistory("chats.sqlite")
    step = await agent.run({"question": text}, message_history=history.load("alice"))
    history.save("alice", step.messages)

:class:`MemoryHistory` keeps them in the process; :class:`SQLiteHistory` in a SQLite file
(the standard library's ``sqlite3``; processes on one machine may share it). Any object
with the two methods of :class:`ChatHistory` serves (a table of your database, Redis).

The shape kept, documented so another program can read it: one row per session,
``(session TEXT PRIMARY KEY, messages TEXT, updated_at REAL)``, ``messages`` the JSON list
of the :class:`~subagent.Message` objects as ``Message.model_dump(mode="json")`` writes them.

Bounded: a session keeps its last ``max_messages`` messages (1,000 by default; the oldest
dropped first, never the conversation's first message, the one that started it, when it
was a user's), and a save larger than ``max_bytes`` (16 MiB of JSON) is refused.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from subagent._errors import ConfigurationError
from subagent.records import Message

__all__ = [
    "ChatHistory",
    "MemoryHistory",
    "SQLiteHistory",
]

MAX_HISTORY_MESSAGES = 1000
"""The messages a session keeps by default (its last ones)."""

MAX_HISTORY_BYTES = 16 * 1024 * 1024
"""The largest history a save takes, as JSON bytes (16 MiB)."""


@runtime_checkable
class ChatHistory(Protocol):
    """Where a chat's conversations are kept, by session id."""

    def load(self, session: str) -> list[Message]:
        """The session's conversation so far (empty for a new session)."""
        ...

    def save(self, session: str, messages: Sequence[Message]) -> None:
        """Keep ``messages`` (a run's ``step.messages``) as the session's conversation."""
        ...


def _kept(messages: Sequence[Message], limit: int) -> list[Message]:
    """The last ``limit`` messages, the conversation's first kept when it is a user's."""
    kept = list(messages)
    if len(kept) <= limit:
        return kept
    if kept and kept[0].role == "user" and limit > 1:
        return [kept[0], *kept[len(kept) - limit + 1 :]]
    return kept[len(kept) - limit :]


def _checked_session(session: object) -> str:
    if not isinstance(session, str) or not session:
        raise ConfigurationError("session", f"must be a non-empty string, got {session!r}")
    return session


def _checked_limits(max_messages: int, max_bytes: int) -> None:
    if type(max_messages) is not int or max_messages < 1:
        raise ConfigurationError("max_messages", f"must be an int >= 1, got {max_messages!r}")
    if type(max_bytes) is not int or max_bytes < 1:
        raise ConfigurationError("max_bytes", f"must be an int >= 1, got {max_bytes!r}")


def _messages(text: str) -> list[Message]:
    """A row's messages. Raises ValueError, TypeError or RecursionError if it is none."""
    data = json.loads(text)
    if not isinstance(data, list):
        raise TypeError(f"a JSON {type(data).__name__}, not a list")
    return [Message.model_validate(item) for item in data]


class MemoryHistory:
    """:class:`ChatHistory` in this process's memory (a test, a single worker).

    Args:
        max_messages: The messages a session keeps (its last ones).
    """

    __slots__ = ("_lock", "_max_messages", "_sessions")

    def __init__(self, *, max_messages: int = MAX_HISTORY_MESSAGES):
        _checked_limits(max_messages, MAX_HISTORY_BYTES)
        self._max_messages = max_messages
        self._sessions: dict[str, tuple[Message, ...]] = {}
        self._lock = threading.Lock()

    def load(self, session: str) -> list[Message]:
        """The session's conversation so far (empty for a new session)."""
        with self._lock:
            return list(self._sessions.get(_checked_session(session), ()))

    def save(self, session: str, messages: Sequence[Message]) -> None:
        """Keep ``messages`` as the session's conversation (its last ``max_messages``)."""
        kept = tuple(_kept(messages, self._max_messages))
        with self._lock:
            self._sessions[_checked_session(session)] = kept


_TABLE = "subagent_chat_history"


class SQLiteHistory:
    """:class:`ChatHistory` in a SQLite file (created with its table when missing).

    Each load and save is one statement in its own connection: a save replaces the
    session's row at once, so a reader sees the conversation before or after it, never
    half. Blocking file I/O, short: call it from a worker thread
    (``anyio.to_thread.run_sync``) where an event loop must never wait on a disk.

    Args:
        path: The SQLite file.
        max_messages: The messages a session keeps (its last ones).
        max_bytes: The largest history a save takes, as JSON bytes.
        timeout: Seconds a statement waits for another process's lock, then raises.

    Raises:
        sqlite3.Error: The file cannot be opened or is not a SQLite database.
    """

    __slots__ = ("_max_bytes", "_max_messages", "_path", "_timeout")

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_messages: int = MAX_HISTORY_MESSAGES,
        max_bytes: int = MAX_HISTORY_BYTES,
        timeout: float = 30.0,
    ):
        _checked_limits(max_messages, max_bytes)
        self._path = os.fspath(path)
        self._max_messages = max_messages
        self._max_bytes = max_bytes
        self._timeout = timeout
        connection = self._connect()
        try:
            connection.execute(
                f"CREATE TABLE IF NOT EXISTS {_TABLE} "
                "(session TEXT PRIMARY KEY, messages TEXT NOT NULL, updated_at REAL NOT NULL)"
            )
        finally:
            connection.close()

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self._path, timeout=self._timeout, isolation_level=None)

    def load(self, session: str) -> list[Message]:
        """The session's conversation so far (empty for a new session).

        Raises:
            ConfigurationError: The row is not a list of messages (a program that wrote
                it broke the shape): naming the session and the first bad message.
        """
        connection = self._connect()
        try:
            row = connection.execute(
                f"SELECT messages FROM {_TABLE} WHERE session = ?", (_checked_session(session),)
            ).fetchone()
        finally:
            connection.close()
        if row is None:
            return []
        try:
            return _messages(row[0])
        except (ValueError, TypeError, RecursionError) as exc:
            raise ConfigurationError(
                "history", f"session {session!r} in {self._path}: not a list of messages "
                f"({type(exc).__name__}: {str(exc)[:200]})"
            ) from None  # fmt: skip

    def save(self, session: str, messages: Sequence[Message]) -> None:
        """Keep ``messages`` as the session's conversation (its last ``max_messages``).

        Raises:
            ConfigurationError: They are larger than ``max_bytes`` as JSON (nothing saved).
        """
        kept = _kept(messages, self._max_messages)
        text = json.dumps([message.model_dump(mode="json") for message in kept],
                          ensure_ascii=False)  # fmt: skip
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > self._max_bytes:
            raise ConfigurationError(
                "messages", f"session {session!r}: {size} bytes of history, over max_bytes="
                f"{self._max_bytes}; nothing was saved"
            )  # fmt: skip
        connection = self._connect()
        try:
            connection.execute(
                f"INSERT INTO {_TABLE} (session, messages, updated_at) VALUES (?, ?, ?) "
                "ON CONFLICT(session) DO UPDATE SET messages = excluded.messages, "
                "updated_at = excluded.updated_at",
                (_checked_session(session), text, time.time()),
            )
        finally:
            connection.close()

    def delete(self, session: str) -> None:
        """Forget the session's conversation."""
        connection = self._connect()
        try:
            connection.execute(
                f"DELETE FROM {_TABLE} WHERE session = ?", (_checked_session(session),)
            )
        finally:
            connection.close()
