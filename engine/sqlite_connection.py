"""The engine's SQLite connections: WAL, foreign keys, and a write lock taken up front.

Reads run outside transactions and always see the latest commit; the first write of a
transaction begins ``IMMEDIATE``, taking SQLite's single write lock before it writes
instead of failing with ``SQLITE_BUSY`` on a lock upgrade. A thread whose other session
holds that lock would wait for itself forever: ``SessionConflict`` says so at once.
(PostgreSQL's connections: engine/pg_connection.py.)
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine

from .errors import SessionConflict

#: The engines given their connection settings already. Weak: a dropped engine leaves, and
#: a new one is never mistaken for it (an ``id()`` can be reused once its object is gone).
_prepared: weakref.WeakSet[Engine] = weakref.WeakSet()


def prepare(engine: Engine) -> None:
    """Give ``engine``'s connections the engine's SQLite settings, once per engine."""
    if engine in _prepared:
        return
    _prepared.add(engine)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let us emit BEGIN ourselves (pysqlite's own transaction handling is deferred).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        if engine.url.database not in (None, "", ":memory:"):
            cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    @event.listens_for(engine, "checkin")
    def _checked_in(dbapi_connection: Any, _record: Any) -> None:
        with _writers_lock:  # rolled back by the pool's reset: it holds no lock now
            _writers.pop(id(dbapi_connection), None)

    @event.listens_for(engine, "before_cursor_execute")
    def _begin_before_write(
        conn: Any, _cursor: Any, statement: str, _params: Any, _context: Any, _many: bool
    ) -> None:
        # Reads run outside transactions and always see the latest commit (no stale WAL
        # snapshot held by an idle session); the first write begins IMMEDIATE, taking the
        # write lock up front instead of failing with SQLITE_BUSY on a lock upgrade.
        if statement.lstrip()[:9].upper().startswith(WRITES):
            begin_immediate(conn.connection.dbapi_connection, file_of(engine))


#: The first words of the statements that write (db.py counts them too).
WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE", "SAVEPOINT", "CREATE", "DROP", "ALTER")


def file_of(engine: Engine) -> str | None:
    """The absolute path of a SQLite database file (None in memory)."""
    database = engine.url.database
    if database in (None, "", ":memory:") or database.startswith("file:"):
        return None
    return os.path.abspath(database)


#: The SQLite connections that hold a write lock, by id: (connection, thread, file).
_writers: dict[int, tuple[Any, int, str]] = {}
_writers_lock = threading.Lock()


def begin_immediate(dbapi_connection: Any, file: str | None = None) -> None:
    """Take the write lock of the SQLite ``file`` on this connection, unless it holds it.

    A thread whose other connection to the same file holds the lock (a session that wrote
    and has not committed) would wait for itself: ``SessionConflict`` says so at once."""
    if dbapi_connection.in_transaction:
        return
    if file is None:
        dbapi_connection.execute("BEGIN IMMEDIATE")
        return
    thread = threading.get_ident()
    with _writers_lock:
        for key, (other, holder, held_file) in list(_writers.items()):
            try:
                holding = other.in_transaction
            except Exception:  # closed
                holding = False
            if not holding:
                del _writers[key]
            elif holder == thread and held_file == file and other is not dbapi_connection:
                raise SessionConflict(
                    f"another session of this thread has written to {file} and not committed, "
                    "so it holds SQLite's write lock and this transaction would wait for it "
                    "forever: do this work in that session (engine.complete_action(action_id, "
                    "session=session), an engine.commands function with session=session, or an "
                    "action or actor loaded in that session), or commit that session first"
                )
    dbapi_connection.execute("BEGIN IMMEDIATE")
    with _writers_lock:
        _writers[id(dbapi_connection)] = (dbapi_connection, thread, file)
