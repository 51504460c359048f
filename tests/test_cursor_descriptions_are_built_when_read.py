"""On PostgreSQL, the engine's cursors build ``description``'s columns only when they are
read: SQLAlchemy asks for the description after every statement but reads its columns
only the first time a compiled statement runs. What is read is psycopg's own answer, for
the result it was asked about, even after the cursor ran the next statement."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy import select
from sqlalchemy.engine import Engine

import engine
from engine import db, pg_connection
from engine.models import Action

pytestmark = pytest.mark.postgresql_only


@pytest.fixture
def own_engine(backend: Engine) -> Iterator[Engine]:
    url = backend.url.render_as_string(hide_password=False)
    sa_engine = engine.configure(url, pool_size=1, max_overflow=0)
    yield sa_engine
    sa_engine.dispose()
    engine.configure(backend)


def test_the_description_is_psycopgs_own_for_the_result_it_was_asked_about(own_engine: Engine) -> None:
    raw = own_engine.raw_connection()
    try:
        cursor = raw.driver_connection.cursor()  # type: ignore[union-attr]
        assert isinstance(cursor, pg_connection.Cursor)
        cursor.execute("SELECT 1 AS n, 'x'::varchar(7) AS word, now() AS at")
        described = cursor.description
        cursor.execute("SELECT 2 AS other")  # the cursor moves on before it is read

        plain = psycopg.Cursor(raw.driver_connection)  # type: ignore[arg-type]
        plain.execute("SELECT 1 AS n, 'x'::varchar(7) AS word, now() AS at")
        assert described is not None and plain.description is not None
        assert len(described) == 3
        assert [tuple(column) for column in described] == [tuple(column) for column in plain.description]
        assert [column.name for column in described] == ["n", "word", "at"]
        assert described[1].type_display == plain.description[1].type_display == "varchar(7)"

        cursor.execute("CREATE TEMPORARY TABLE described (n int)")
        assert cursor.description is None  # no rows: no description, as psycopg's
        cursor.execute("SELECT")
        assert cursor.description is not None and len(cursor.description) == 0
    finally:
        raw.close()


def test_orm_and_core_results_read_their_columns(own_engine: Engine) -> None:
    with db.session() as session:
        for _ in range(7):  # past psycopg's prepare threshold: cached metadata, prepared
            rows = session.execute(
                select(Action.id.label("the_id"), Action.status).where(Action.id < 0)
            ).all()
            assert rows == []
        result = session.execute(select(Action.id.label("the_id"), Action.status).where(Action.id < 0))
        assert list(result.keys()) == ["the_id", "status"]
