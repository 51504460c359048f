"""The engine's pool on PostgreSQL: no ping per transaction, yet a connection that died
while it sat idle (PostgreSQL restarted) is replaced before anyone uses it, and one that
dies while in use is retried by ``db.retrying`` on a new connection."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import event, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

import engine
from engine import db, performance
from tests.conftest import POSTGRES_ADMIN_URL


def terminate_others(url: str) -> None:
    """What a PostgreSQL restart does to the pool: every other backend of the database dies."""
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


pytestmark = pytest.mark.postgresql_only


@pytest.fixture
def url(database: Engine) -> Iterator[str]:
    """A database of its own: terminating its connections leaves the shared one alone."""
    name = f"stepwise_reconnect_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield f"{POSTGRES_ADMIN_URL.rsplit('/', 1)[0]}/{name}"
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def pool(url: str, database: Engine) -> Iterator[Engine]:
    sa_engine = db.configure(url, pool_size=2)
    yield sa_engine
    sa_engine.dispose()
    db.configure(database)


def statements(sa_engine: Engine) -> list[str]:
    seen: list[str] = []
    event.listen(sa_engine, "before_cursor_execute", lambda *args: seen.append(args[2]))
    return seen


def test_a_busy_pool_sends_no_pings(pool: Engine) -> None:
    for _ in range(5):
        with db.transaction() as session:
            session.execute(text("SELECT 42"))
    with pool.connect() as connection:
        seen = statements(pool)
        for _ in range(3):
            connection.execute(text("SELECT 42"))
            connection.commit()
    assert seen == ["SELECT 42"] * 3


def test_a_connection_that_died_while_idle_is_replaced(
    pool: Engine, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with db.transaction() as session:
        session.execute(text("SELECT 1"))
    terminate_others(url)
    monkeypatch.setattr(db, "IDLE_PING_SECONDS", 0.0)

    with db.transaction() as session:
        assert session.execute(text("SELECT 42")).scalar() == 42


def test_a_transaction_whose_connection_died_is_run_again(pool: Engine, url: str) -> None:
    with db.transaction() as session:
        session.execute(text("SELECT 1"))
    terminate_others(url)  # idle for less than IDLE_PING_SECONDS: not pinged
    attempts: list[int] = []

    def work() -> int:
        attempts.append(1)
        return int(session.execute(text("SELECT 42")).scalar_one())

    with db.session() as session:
        assert db.retrying(session, work) == 42
    assert len(attempts) == 2


def test_a_read_sent_through_psycopg_alone_whose_connection_died_is_run_again(pool: Engine, url: str) -> None:
    # Given the engine's tables, and a pooled connection that dies while idle
    engine.create_all(pool)
    with db.transaction() as session:
        session.execute(text("SELECT 1"))
    terminate_others(url)
    attempts: list[int] = []

    def work() -> dict[str, Any]:
        attempts.append(1)
        return performance.lock_all(session, {"a lane"})  # read through psycopg (engine/rows.py)

    # When the first statement of a transaction is such a read, it fails as any statement
    # would on a dead connection, and the transaction runs again on a new one
    with db.session() as session:
        assert db.retrying(session, work) == {}
    assert len(attempts) == 2


def test_a_connection_lost_during_the_commit_is_not_run_again(pool: Engine, url: str) -> None:
    # Given work whose COMMIT finds the connection gone (it may or may not have committed)
    attempts: list[int] = []

    def kill_before_commit(connection: object) -> None:
        terminate_others(url)

    event.listen(pool, "commit", kill_before_commit)

    def work() -> int:
        attempts.append(1)
        return int(session.execute(text("SELECT 42")).scalar_one())

    # When it runs through retrying
    with db.session() as session, pytest.raises(DBAPIError) as raised:
        db.retrying(session, work)

    # Then it ran once: whether it committed is for the caller to find out
    assert raised.value.connection_invalidated
    assert attempts == [1]


def test_the_pool_holds_the_connections_the_environment_names(
    url: str, database: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a worker's environment (stepwise worker sets it: engine/cli.py)
    monkeypatch.setenv(db.POOL_SIZE_VARIABLE, "34")
    # When the engine is configured from it
    sa_engine = db.configure(url)
    try:
        # Then the process keeps 34 connections, and opens no more: a bound, no overflow
        assert sa_engine.pool.size() == 34  # type: ignore[attr-defined]
        assert sa_engine.pool._max_overflow == 0  # type: ignore[attr-defined]
    finally:
        sa_engine.dispose()
        db.configure(database)


@pytest.mark.parametrize("value", ["many", "0", "-3"])
def test_a_pool_size_that_is_not_a_count_is_refused_by_name(
    url: str, database: Engine, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(db.POOL_SIZE_VARIABLE, value)
    with pytest.raises(ValueError, match=f"STEPWISE_POOL_SIZE must be a whole number .* got '{value}'"):
        db.configure(url)
    db.configure(database)
