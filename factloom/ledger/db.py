"""Engine and sessions for the ledger; works on SQLite files and PostgreSQL alike.

Every statement's round trip is timed on the engine (``before/after_cursor_execute``) into
``factloom_store_seconds{store="ledger", op}``: ``read`` for a ``SELECT``, ``write`` otherwise.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import Connection, ExecutionContext
from sqlalchemy.orm import Session, sessionmaker

from factloom.metrics import STORE_SECONDS

__all__ = ["Database"]


class Database:
    """One engine and its session factory. ``url`` is any SQLAlchemy URL."""

    def __init__(self, url: str) -> None:
        self.url = url
        if url.startswith("sqlite:///"):
            Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
            self.engine: Engine = create_engine(url, connect_args={"timeout": 30})
            event.listen(self.engine, "connect", _sqlite_pragmas)
        else:
            self.engine = create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)
        event.listen(self.engine, "before_cursor_execute", _started)
        event.listen(self.engine, "after_cursor_execute", _finished)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session in one transaction: committed on success, rolled back on any error."""
        with self._sessions.begin() as session:
            yield session

    def dispose(self) -> None:
        self.engine.dispose()


def _sqlite_pragmas(dbapi_connection: object, _record: object) -> None:
    # WAL lets the API read while a worker writes; foreign keys are off by default in SQLite
    cursor = dbapi_connection.cursor()  # type: ignore[attr-defined]
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


_READ, _WRITE = STORE_SECONDS.labels("ledger", "read"), STORE_SECONDS.labels("ledger", "write")


def _started(conn: Connection, cursor: Any, statement: str, parameters: Any, context: ExecutionContext | None,
             executemany: bool) -> None:
    if context is not None:
        context._factloom_started = time.perf_counter()  # type: ignore[attr-defined]  # one per execution


def _finished(conn: Connection, cursor: Any, statement: str, parameters: Any, context: ExecutionContext | None,
              executemany: bool) -> None:
    started = getattr(context, "_factloom_started", None)
    if started is not None:  # a failed statement has no after event: nothing is left behind
        op = _READ if statement.lstrip()[:6].upper() == "SELECT" else _WRITE
        op.observe(time.perf_counter() - started)
