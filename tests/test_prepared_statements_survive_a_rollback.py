"""On PostgreSQL, the engine's connections keep their prepared statements when a
transaction rolls back. psycopg prepares a statement run five times on a connection, and
deallocates all of them at every ROLLBACK; a worker rolls back each body that wrote
nothing (it releases the body's lease without paying for a commit), so the engine's
statements were parsed and planned afresh every time: planning was ~40% of PostgreSQL's
time per action. A connection that is lost still fails its rollback as psycopg's does."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy import select, text
from sqlalchemy.engine import Engine

import engine
from engine import db
from engine.models import Action

pytestmark = pytest.mark.postgresql_only


@pytest.fixture
def own_engine(backend: Engine) -> Iterator[Engine]:
    """A pool of one connection configured as the engine's, so the test sees the same
    server session each time."""
    url = backend.url.render_as_string(hide_password=False)
    sa_engine = engine.configure(url, pool_size=1, max_overflow=0)
    yield sa_engine
    sa_engine.dispose()
    engine.configure(backend)


def prepared(sa_engine: Engine) -> list[str]:
    with sa_engine.connect() as connection:
        return list(connection.execute(text("SELECT statement FROM pg_prepared_statements")).scalars())


def test_statements_prepared_before_a_rollback_are_still_prepared_after_it(own_engine: Engine) -> None:
    # Given a statement run often enough on the engine's connection to be prepared
    query = select(Action.id).where(Action.id == -1)
    for _ in range(6):
        with db.session() as session:
            session.execute(query).all()
            session.commit()
    assert any("FROM stepwise_actions" in statement for statement in prepared(own_engine))

    # When a transaction on it rolls back (as a body that wrote nothing does)
    with db.session() as session:
        session.execute(query).all()
        session.rollback()

    # Then the statement is still prepared, and still runs
    assert any("FROM stepwise_actions" in statement for statement in prepared(own_engine))
    with db.session() as session:
        assert session.execute(query).all() == []


def test_a_rollback_on_a_lost_connection_fails_as_psycopgs_does(own_engine: Engine) -> None:
    with own_engine.connect() as connection:
        connection.execute(text("SELECT 1"))
        raw = connection.connection.dbapi_connection
        assert raw is not None
        with psycopg.connect(str(own_engine.url.set(drivername="postgresql")), autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (raw.info.backend_pid,))
        with pytest.raises(psycopg.OperationalError):
            raw.rollback()
        connection.invalidate()
