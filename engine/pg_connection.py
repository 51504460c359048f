"""The engine's PostgreSQL connections: psycopg's, keeping their prepared statements
across a ROLLBACK.

psycopg prepares a statement once a connection has run it five times (``prepare_threshold``)
and, to be safe against DDL undone by the rollback, deallocates every prepared statement
at each ROLLBACK. A worker rolls back every step body that wrote nothing: that releases the
body's lease without the WAL flush a commit of its row lock would cost. With psycopg's
default the engine's statements were therefore parsed and planned afresh almost every
time: planning alone was ~40% of PostgreSQL's statement time in ``bench/throughput.py``,
and keeping the statements cut PostgreSQL's CPU per action by ~40%.

A prepared statement is server session state, not transaction state: PostgreSQL keeps it
across a rollback, and re-plans it by itself when a table it reads changes. psycopg still
discards its statements after a DROP or ALTER run on the connection; only the ROLLBACK
case changes here. The engine's connections run no DDL outside migrations.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import pq


class Connection(psycopg.Connection[Any]):
    """A psycopg connection whose ROLLBACK leaves its prepared statements in place."""

    def rollback(self) -> None:
        if self.pgconn.pipeline_status != pq.PipelineStatus.OFF:
            super().rollback()  # psycopg's pipeline bookkeeping: leave it to psycopg
            return
        with self.lock:
            if self.pgconn.transaction_status == pq.TransactionStatus.IDLE:
                return
            result = self.pgconn.exec_(b"ROLLBACK")
        if result.status != pq.ExecStatus.COMMAND_OK:
            # A lost connection: psycopg's own rollback raises the error it always does.
            super().rollback()


def connect(_dialect: Any, _record: Any, cargs: Any, cparams: Any) -> Connection:
    """SQLAlchemy's ``do_connect`` hook: open the engine's connections as ``Connection``."""
    return Connection.connect(*cargs, **cparams)
