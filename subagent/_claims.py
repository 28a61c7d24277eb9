"""Single-use resumes: where the ids of the states resumed are claimed.

``resume(state, claims=store)`` claims the state's id before anything runs, and refuses a
state claimed already. A state's id names its point of the run (every copy of one pause
has the same id), so a claims store lets one pause run its approved calls once.
:class:`MemoryClaims` keeps the ids in one process; :class:`SQLiteClaims` in a SQLite file
that several processes on one machine share (what ``subagent resume --claims`` uses).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from typing import Protocol, runtime_checkable

__all__ = ["MemoryClaims", "SQLiteClaims", "StateClaims"]


@runtime_checkable
class StateClaims(Protocol):
    """Where single-use resumes record the states they resumed (``resume(claims=...)``).

    ``claim(state_id)`` returns ``True`` the first time an id is claimed and ``False`` after;
    it must be atomic where several processes resume (a unique key in a database, Redis
    ``SET NX``).
    """

    def claim(self, state_id: str) -> bool:
        """Claim ``state_id``: whether this is its first use."""
        ...


class MemoryClaims:
    """:class:`StateClaims` in this process's memory, for the last ``limit`` ids claimed.

    Enough when one process resumes (from any of its threads: a claim is atomic); across
    processes, use a shared store.
    """

    __slots__ = ("_ids", "_limit", "_lock")

    def __init__(self, limit: int = 100_000):
        self._ids: dict[str, None] = {}
        self._limit = limit
        self._lock = threading.Lock()

    def claim(self, state_id: str) -> bool:
        """Claim ``state_id``: whether this is its first use."""
        with self._lock:  # the check and the set as one step, the eviction with them
            if state_id in self._ids:
                return False
            if len(self._ids) >= self._limit:
                del self._ids[next(iter(self._ids))]
            self._ids[state_id] = None
            return True


_TABLE = "subagent_claims"


class SQLiteClaims:
    """:class:`StateClaims` in a SQLite file: atomic across the processes that share it.

    Each claim is one ``INSERT`` into a table whose key is the state id, in its own
    connection: of two processes claiming one id at once, SQLite's lock lets exactly one
    insert it. The file is created on first use; ids are kept until you delete them (a
    row is a state id and a time, some 60 bytes). A claim blocks its thread for as long
    as another writer holds the lock, at most ``timeout`` seconds, then raises.

    Args:
        path: The SQLite file (created with its table when missing).
        timeout: Seconds a claim waits for another process's lock (default 30).

    Raises:
        sqlite3.Error: The file cannot be opened or is not a SQLite database.
    """

    __slots__ = ("_path", "_timeout")

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 30.0):
        self._path = os.fspath(path)
        self._timeout = timeout
        connection = self._connect()
        try:
            connection.execute(
                f"CREATE TABLE IF NOT EXISTS {_TABLE} "
                "(state_id TEXT PRIMARY KEY, claimed_at REAL NOT NULL)"
            )
        finally:
            connection.close()

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self._path, timeout=self._timeout, isolation_level=None)

    def claim(self, state_id: str) -> bool:
        """Claim ``state_id``: whether this is its first use (in any process)."""
        connection = self._connect()
        try:
            inserted = connection.execute(
                f"INSERT OR IGNORE INTO {_TABLE} (state_id, claimed_at) VALUES (?, ?)",
                (state_id, time.time()),
            )
            return inserted.rowcount == 1
        finally:
            connection.close()
