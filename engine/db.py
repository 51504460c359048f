"""The database: the engine's declarative base, its connection and its sessions.

The database is the only source of truth. ``configure()`` is the one place that reads
``DATABASE_URL`` (and ``STEPWISE_POOL_SIZE``). On SQLite every engine transaction takes the
write lock first (``lock_for_write``), so SQLite's single writer serialises transitions like
a lane lock.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import BigInteger, Index, Integer, MetaData, create_engine, event, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, DisconnectionError, OperationalError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, SessionTransaction, mapped_column, sessionmaker

from . import clock, commit_buffers, pg_connection, sqlite_connection

DEFAULT_URL = "sqlite:///stepwise.db"
#: The environment variable holding the most connections a process opens (its pool, with no
#: overflow): ``stepwise worker`` sets it (engine/cli.py, ``default_pool_size``). A thread
#: holds a connection while a body of its own runs, and the process's group-commit batch
#: holds one; no thread waits for a batch holding one, so a pool smaller than the threads
#: makes bodies that query wait their turn, never a deadlock.
POOL_SIZE_VARIABLE = "STEPWISE_POOL_SIZE"

#: Primary keys are BIGINT on PostgreSQL and INTEGER (the rowid) on SQLite.
Id = BigInteger().with_variant(Integer(), "sqlite")

T = TypeVar("T")


def partial_index(name: str, *columns: str, where: str, unique: bool = False) -> Index:
    """An index of the rows ``where`` (an SQL condition) holds for, alike on SQLite and
    PostgreSQL."""
    return Index(name, *columns, unique=unique, sqlite_where=text(where), postgresql_where=text(where))


class Base(DeclarativeBase):
    """Declarative base of the engine's own tables (``stepwise_*``)."""

    metadata = MetaData(
        naming_convention={
            "ix": "ix_%(table_name)s_%(column_0_N_name)s",
            "uq": "uq_%(table_name)s_%(column_0_N_name)s",
            "ck": "ck_%(table_name)s_%(constraint_name)s",
            "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
            "pk": "pk_%(table_name)s",
        }
    )


class Timestamps:
    created_at: Mapped[datetime] = mapped_column(default=clock.now)
    updated_at: Mapped[datetime] = mapped_column(default=clock.now, onupdate=clock.now)


_engine: Engine | None = None
_sessionmaker: sessionmaker[Session] | None = None


def configure(target: str | Engine | None = None, **engine_options: Any) -> Engine:
    """Point the engine at a database: a URL, an existing SQLAlchemy ``Engine`` (for example
    Flask-SQLAlchemy's ``db.engine``), or ``DATABASE_URL`` / ``sqlite:///stepwise.db``."""
    global _engine, _sessionmaker
    if isinstance(target, Engine):
        engine = target
    else:
        url = target or os.environ.get("DATABASE_URL") or DEFAULT_URL
        url = normalize_url(url)
        if url.startswith("sqlite"):
            engine_options.setdefault("connect_args", {"timeout": 30})
        elif os.environ.get(POOL_SIZE_VARIABLE):
            engine_options.setdefault("pool_size", pool_size_from_environment())
            engine_options.setdefault("max_overflow", 0)
        if not url.startswith("sqlite"):
            # The connection returned last is handed out next. PostgreSQL caches a
            # statement's plan in the session that prepared it (psycopg prepares one on a
            # connection's fifth run of it), so a statement is parsed and planned until each
            # connection it runs on has run it a few times. Handed out in turn (SQLAlchemy's
            # default), a worker's batches went to the connection idle longest of its ~34,
            # each planning every batch statement anew: ~15% of PostgreSQL's statement time
            # in a 3,000-tree bench/throughput.py (pg_stat_statements: 320 plans in 811
            # runs). Last-in first-out, they reuse the same few: PostgreSQL's CPU per action
            # 0.35 -> 0.32 and 0.44 -> 0.39 ms (medians of 3 rounds, two pairs of runs).
            engine_options.setdefault("pool_use_lifo", True)
        engine = create_engine(url, **engine_options)
        if engine.dialect.name == "postgresql" and not engine_options.get("pool_pre_ping"):
            ping_when_idle(engine)
    if engine.dialect.driver == "psycopg" and not event.contains(engine, "do_connect", pg_connection.connect):
        # Connections opened from now on keep their prepared statements (engine/pg_connection.py).
        event.listen(engine, "do_connect", pg_connection.connect)
    if engine.dialect.name == "sqlite":
        sqlite_connection.prepare(engine)
    count_writes(engine)
    _engine = engine
    _sessionmaker = sessionmaker(bind=engine, expire_on_commit=False)
    return engine


def pool_size_from_environment() -> int:
    value = os.environ[POOL_SIZE_VARIABLE]
    try:
        size = int(value)
    except ValueError:
        size = 0
    if size < 1:
        raise ValueError(
            f"{POOL_SIZE_VARIABLE} must be a whole number of connections, at least 1: got {value!r}"
        )
    return size


#: A pooled connection idle for longer than this is pinged before it is used again.
IDLE_PING_SECONDS = 1.0


def ping_when_idle(engine: Engine) -> None:
    """Test a pooled connection before reuse only when it sat idle (PostgreSQL may have
    restarted meanwhile): a dead one is replaced, as ``pool_pre_ping`` would, but a busy
    worker pays no round trip per transaction. A connection that dies while busy fails its
    statement as a disconnect, which empties the pool; ``retrying`` runs the work again."""

    @event.listens_for(engine, "checkin")
    def _checked_in(_dbapi_connection: Any, record: Any) -> None:
        record.info[_IDLE_SINCE] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checked_out(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        idle_since = record.info.get(_IDLE_SINCE)
        if idle_since is not None and time.monotonic() - idle_since > IDLE_PING_SECONDS:
            try:
                engine.dialect.do_ping(dbapi_connection)
            except Exception as error:
                raise DisconnectionError("the pooled connection is gone") from error


_IDLE_SINCE = "stepwise.idle_since"


def normalize_url(url: str) -> str:
    """Accept the ``postgres://`` and ``postgresql://`` URLs that platforms hand out, and
    use psycopg 3 for them."""
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


_WRITES_COUNT = "stepwise.writes"
_counted: set[int] = set()


def count_writes(engine: Engine) -> None:
    """Count each connection's writing statements, so that ``writes`` can tell whether a
    step body wrote anything (then its outcome commits with its writes)."""
    if id(engine) in _counted:
        return
    _counted.add(id(engine))

    @event.listens_for(engine, "before_cursor_execute")
    def _count(conn: Any, _cursor: Any, statement: str, _params: Any, _context: Any, _many: bool) -> None:
        if statement.lstrip()[:9].upper().startswith(sqlite_connection.WRITES):
            conn.info[_WRITES_COUNT] = conn.info.get(_WRITES_COUNT, 0) + 1


def writes(s: Session) -> int:
    """How many writing statements ``s``'s transaction has run so far: 0 before it touched
    the database (asking does not begin one: a claimed step's body that reads nothing
    runs with no transaction at all, engine/claiming.py)."""
    begun = s.info.get(_BEGUN)
    if begun is None:
        return 0
    connection: Connection
    before: int
    connection, before = begun
    return int(connection.info.get(_WRITES_COUNT, 0)) - before


_BEGUN = "stepwise.begun"


@event.listens_for(Session, "after_begin")
def _count_from_begin(s: Session, transaction: SessionTransaction, connection: Any) -> None:
    # The connection's count runs on across transactions (the pool keeps it): count from here.
    if not transaction.nested and _BEGUN not in s.info:
        s.info[_BEGUN] = (connection, int(connection.info.get(_WRITES_COUNT, 0)))


@event.listens_for(Session, "after_transaction_end")
def _forget_begin(s: Session, transaction: SessionTransaction) -> None:
    if transaction.parent is None and not transaction.nested:
        s.info.pop(_BEGUN, None)


def lock_for_write(s: Session) -> None:
    """On SQLite, take the write lock now, so the reads that decide a transition and its
    writes see one state. (PostgreSQL uses row locks instead.) A busy database raises
    SQLAlchemy's ``OperationalError``, which ``retrying`` knows how to retry."""
    connection = s.connection()
    if connection.dialect.name == "sqlite":
        try:
            dbapi_connection = connection.connection.dbapi_connection
            sqlite_connection.begin_immediate(dbapi_connection, sqlite_connection.file_of(connection.engine))
        except connection.dialect.loaded_dbapi.OperationalError as error:
            raise OperationalError("BEGIN IMMEDIATE", None, error) from error


def plan_by_key(s: Session) -> None:
    """On PostgreSQL, have this transaction's statements planned without sequential scans
    where an index serves (``SET LOCAL enable_seqscan = off``). For a group-commit batch,
    whose statements all reach their rows by key (engine/recordset.py).

    A connection keeps its statements prepared, and PostgreSQL keeps the plan it made for a
    prepared statement until the statistics of a table it reads change. Made while the
    tables were small (the first minute of a deployment, or of a benchmark's fresh
    database), that plan reads a table whole, cheaper than probing an index ten times at
    that size, and it kept reading them whole as they grew, until autovacuum's first
    ANALYZE: in ``bench/throughput.py`` the batches read ~2,700 rows per action from the
    invocations, steps, actions and lanes (37 million in 25 s), PostgreSQL's CPU per action
    1.2 ms against 0.7 ms with this. The setting ends with the transaction: it never
    reaches a step body's session, the studio's queries, or an application's own ones on a
    shared engine; an action's callbacks, run in the batch, plan as usual
    (``planned_as_usual``). A statement with no index to serve it is still planned as a
    scan."""
    connection = s.connection()
    if connection.dialect.name == "postgresql":
        connection.exec_driver_sql("SET LOCAL enable_seqscan = off")
        s.info[_PLANNED_BY_KEY] = s.get_transaction()


_PLANNED_BY_KEY = "stepwise.planned_by_key"


@contextmanager
def planned_as_usual(s: Session) -> Iterator[None]:
    """Inside the block, a transaction that plans by key (``plan_by_key``) plans as
    PostgreSQL does by default: for the user's code it runs (an action's callbacks run in
    the batch that completes it), whose queries may need to read a table whole."""
    if s.get_transaction() is None or s.info.get(_PLANNED_BY_KEY) is not s.get_transaction():
        yield
        return
    connection = s.connection()
    connection.exec_driver_sql("SET LOCAL enable_seqscan TO DEFAULT")
    yield
    connection.exec_driver_sql("SET LOCAL enable_seqscan = off")


def get_engine() -> Engine:
    """The configured SQLAlchemy engine (configured from the environment on first use)."""
    if _engine is None:
        configure()
    assert _engine is not None
    return _engine


def session() -> Session:
    """A new session on the configured database. The caller commits or rolls back."""
    if _sessionmaker is None:
        configure()
    assert _sessionmaker is not None
    return _sessionmaker()


@contextmanager
def transaction() -> Iterator[Session]:
    """A session whose work is committed on success and rolled back on error."""
    with session() as s:
        try:
            yield s
            s.commit()
        except BaseException:
            s.rollback()
            raise


def is_retryable(error: BaseException) -> bool:
    """A deadlock, a serialization failure, a busy SQLite file or a lost connection (the
    pool then holds only new ones): the transaction can be run again from the start."""
    if not isinstance(error, DBAPIError):
        return False
    if error.connection_invalidated:
        return True
    orig = getattr(error, "orig", None)
    sqlstate = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if sqlstate in ("40001", "40P01"):
        return True
    return isinstance(error, OperationalError) and "database is locked" in str(error)


def retrying(
    s: Session, work: Callable[[], T], attempts: int = 5, *, lock: bool = True, callers_session: bool = False
) -> T:
    """Run ``work`` in ``s`` and commit, again from the start when the database reports a
    deadlock or a serialization failure (PostgreSQL picks a victim), a busy SQLite file, or
    the connection was lost before the commit (PostgreSQL restarted): it is safe to retry
    because nothing was committed. A connection lost during the commit is not retried: the
    commit may have happened, and the caller (a job's message, redelivered) finds out from
    the database.

    On SQLite the write lock is taken first (``lock_for_write``), unless ``lock`` is False:
    a step body that may only read takes it at its first write, if it writes at all.

    ``callers_session=True`` says ``s`` belongs to the caller, who may have changed things
    in it before calling the engine: see ``_retrying_in_savepoint``."""
    if callers_session and (s.in_transaction() or s.new or s.dirty or s.deleted):
        return _retrying_in_savepoint(s, work, attempts)
    return _attempt(lambda: s, lambda _session: work(), attempts, fresh=False, lock=lock)


def retrying_fresh(work: Callable[[Session], T], attempts: int = 5) -> T:
    """``retrying``, in a new session for each attempt (closed afterwards): no object of a
    failed attempt survives into the next one."""
    return _attempt(session, work, attempts, fresh=True, lock=True)


def _attempt(
    get: Callable[[], Session], work: Callable[[Session], T], attempts: int, *, fresh: bool, lock: bool
) -> T:
    for attempt in range(1, attempts + 1):
        s = get()
        committing = False
        try:
            if lock:
                lock_for_write(s)
            result = work(s)
            if not holds_work(s):
                return result  # nothing begun or pending (a read-only body rolled back)
            committing = True
            s.commit()
            return result
        except Exception as error:
            s.rollback()
            lost_in_commit = committing and isinstance(error, DBAPIError) and error.connection_invalidated
            if attempt == attempts or lost_in_commit or not is_retryable(error):
                raise
        finally:
            if fresh:
                s.close()
        time.sleep(0.01 * attempt)
    raise AssertionError("unreachable")


def holds_work(s: Session) -> bool:
    """Whether committing ``s`` would do anything: a transaction begun, objects to flush,
    or history events and broker messages kept for the commit (``commit_buffers``). A
    commit of a session holding none begins and ends an empty transaction of the session's
    own and sends its events: ~12 µs of CPU, for every step body that wrote nothing and
    rolled back (2% of a worker's samples in bench/throughput.py)."""
    if s.in_transaction() or s.new or s.dirty or s.deleted:
        return True
    return any(s.info.get(key) for key in commit_buffers.COMMIT_BUFFERS)


def _retrying_in_savepoint(s: Session, work: Callable[[], T], attempts: int) -> T:
    """``retrying`` in a session holding the caller's changes, which are never lost: they
    are flushed first, ``work`` runs in a SAVEPOINT, and only the SAVEPOINT is rolled back
    and run again; then the whole transaction commits, the caller's changes with it. An
    error that is not retried undoes the SAVEPOINT alone and propagates, leaving the
    caller's changes pending in ``s``, theirs to commit or roll back. (A lost connection or a
    failed COMMIT took them with it: that propagates too, never retried.)"""
    for attempt in range(1, attempts + 1):
        try:
            lock_for_write(s)  # on SQLite, may find the file busy: nothing is undone then
        except Exception as error:
            if attempt == attempts or not is_retryable(error):
                raise
            time.sleep(0.01 * attempt)
            continue
        savepoint = s.begin_nested()  # flushes the caller's changes: their errors are theirs
        try:
            result = work()
            savepoint.commit()
        except Exception as error:
            if isinstance(error, DBAPIError) and error.connection_invalidated:
                raise
            savepoint.rollback()
            if attempt == attempts or not is_retryable(error):
                raise
            time.sleep(0.01 * attempt)
            continue
        s.commit()
        return result
    raise AssertionError("unreachable")
