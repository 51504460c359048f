"""The engine's PostgreSQL connections: psycopg's, keeping their prepared statements
across a ROLLBACK, with a ``cursor.description`` built only when it is read.

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

SQLAlchemy asks for ``cursor.description`` after every statement that returns rows, but
reads its columns only the first time a compiled statement runs (it caches the result's
metadata on the statement). psycopg builds a ``Column`` per field at each ask: ~160 per
action, 6% of the engine's CPU in ``bench/hotpath.py``. Here the ask returns a sequence
that builds those columns from its own result when it is first read, so they are built
only when something reads them.

JSON values (arguments, results, history data) are read with orjson, ~5x faster than the
``json`` module psycopg uses by default, unless ``json`` reads them otherwise: orjson reads
an integer past 64 bits as a float, and refuses a lone surrogate or a number past a
double's range, so a document holding a run of 19 digits or more, or that orjson refuses,
is read by ``json`` as before.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, overload

import orjson
import psycopg
from psycopg import Column, pq
from psycopg.types.json import set_json_loads

#: The results that have columns even with no fields (``SELECT;``), as psycopg's own
#: ``description`` decides (TUPLES_CHUNK is psycopg 3.2's).
_ROWS = tuple(
    getattr(pq.ExecStatus, name)
    for name in ("TUPLES_OK", "SINGLE_TUPLE", "TUPLES_CHUNK")
    if hasattr(pq.ExecStatus, name)
)


class _Result:
    """What ``Column`` reads of a cursor, frozen at one result (the cursor moves on)."""

    __slots__ = ("_encoding", "adapters", "pgresult")

    def __init__(self, cursor: psycopg.Cursor[Any], result: pq.abc.PGresult) -> None:
        self.pgresult = result
        self._encoding = cursor._encoding
        self.adapters = cursor.adapters


class Description(Sequence[Column]):
    """``cursor.description`` of one result, its columns built when first read."""

    __slots__ = ("_columns", "_count", "_result")

    def __init__(self, result: _Result, count: int) -> None:
        self._result: _Result | None = result
        self._count = count
        self._columns: list[Column] = []

    def _built(self) -> list[Column]:
        if self._result is not None:
            result, self._result = self._result, None
            self._columns = [Column(result, i) for i in range(self._count)]  # type: ignore[arg-type]
        return self._columns

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> Column: ...
    @overload
    def __getitem__(self, index: slice) -> list[Column]: ...
    def __getitem__(self, index: int | slice) -> Column | list[Column]:
        return self._built()[index]

    def __repr__(self) -> str:
        return repr(self._built())


class Cursor(psycopg.Cursor[Any]):
    """psycopg's cursor, whose ``description`` builds its columns when they are read."""

    @property
    def description(self) -> Description | None:  # type: ignore[override]
        result = self.pgresult
        if not result or not (result.nfields or result.status in _ROWS):
            return None
        return Description(_Result(self, result), result.nfields)


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
    connection = Connection.connect(*cargs, **cparams)
    connection.cursor_factory = Cursor
    set_json_loads(json_loads, connection)
    return connection


def json_loads(data: str | bytes) -> Any:
    """A JSON document (psycopg hands over bytes) as Python values, as ``json.loads``
    reads it."""
    if _LONG_DIGITS.search(data if isinstance(data, bytes) else data.encode()) is None:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return json.loads(data)


#: A run of digits that may be an integer orjson reads as a float (past 64 bits).
_LONG_DIGITS = re.compile(rb"\d{19}")
