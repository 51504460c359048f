"""A PostgreSQL pool that the engine configures hands out the connection returned last:
an idle or busy worker's batches run on the same few connections, whose statements are
prepared and planned already, instead of going round every connection of the pool
(engine/db.py, ``configure``)."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Engine

from engine import db

pytestmark = pytest.mark.postgresql_only

BACKEND_PID = text("SELECT pg_backend_pid()")


def test_the_next_transaction_runs_on_the_connection_returned_last(
    postgres_url: str, database: Engine
) -> None:
    sa_engine = db.configure(postgres_url, pool_size=3)
    try:
        first, second = db.session(), db.session()
        pids = [s.execute(BACKEND_PID).scalar() for s in (first, second)]
        assert pids[0] != pids[1]
        first.close()
        second.close()  # returned last

        with db.transaction() as s:
            assert s.execute(BACKEND_PID).scalar() == pids[1]
        with db.transaction() as s:
            assert s.execute(BACKEND_PID).scalar() == pids[1]
    finally:
        sa_engine.dispose()
        db.configure(database)
