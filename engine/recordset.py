"""Set-based writes: many rows in one statement whose text does not depend on how many.

On PostgreSQL a batch of rows is inserted as ``INSERT … SELECT … FROM
json_populate_recordset(NULL::table, %s)``: the rows travel as one JSON parameter, made by
orjson and read by PostgreSQL into the table's own row type. The text is the
same for one row or sixty-four, so psycopg prepares it once per connection and PostgreSQL
plans it once, where a multi-row ``VALUES`` has a text (and a plan) per number of rows and
SQLAlchemy compiles each one afresh. One JSON text also costs the client far less than an
array per column (psycopg inspects every element of every array it sends: ~190 µs against
~57 µs for four history events, measured with psycopg alone). River and Graphile Worker
write their batches set-based in the same spirit (``throughput-designs.md``). SQLite has
no such function: its callers keep SQLAlchemy's insert.

PostgreSQL estimates a JSON recordset at 100 rows, whatever it holds. Joined to a table by
key, that estimate made it hash-join a scan of the whole table, cheaper than 100 probes of
the index up to ~100,000 rows: in ``bench/throughput.py`` such scans were 18% of the batch
statements' time. A statement that joins recordset rows to a table by key therefore also
names the keys as an array, ``id = ANY(ARRAY(SELECT id FROM rows))``, which PostgreSQL
estimates at 10 and reaches through the index
(tests/test_batch_statements_reach_their_rows_by_key_in_large_tables.py).

The partial indexes of live rows (pending and performing actions, one performing action per
lane) hold a few rows among millions, and how many swings with the load. PostgreSQL takes
their size from the last VACUUM or ANALYZE: taken when nothing was live, it holds them for
empty however full a burst of work makes them, and then finds reading one whole as cheap as
probing it by key. At 1,000,000 actions of history (``bench/growth.py``) a batch's
completing statement read the performing-action index whole for its actions, and the lane
index whole for each action it completed (5,600 live rows a time: 15,900 buffers a call,
PostgreSQL's CPU per action up 80%). So a statement that finds actions by key and checks
that they are performing compares their status with a value of a ``MATERIALIZED`` CTE, which
the planner cannot see, so no partial index on the status can serve it and the primary key
does. It compares with ``IS NOT DISTINCT FROM``, which no index serves, not ``=``: in tables
whose statistics were never taken, ``=`` let PostgreSQL probe the index of statuses for
"performing" once per action of the batch, reading every performing action each time (2,400
to 2,700 rows a probe in a benchmark's fresh database). And one that looks for another live
member of a lane asks for the first by id (``ORDER BY id LIMIT 1`` in a ``LATERAL`` join),
which only a probe of the lane index by key returns without sorting.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from datetime import date, datetime
from typing import Any

import orjson
from sqlalchemy import Table
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Connection

_DIALECT = postgresql.dialect()  # type: ignore[no-untyped-call]


def insert(
    connection: Connection,
    table: Table,
    rows: Sequence[Mapping[str, Any]],
    *,
    on_conflict: str = "",
    also: tuple[Table, Sequence[Mapping[str, Any]], str] | None = None,
) -> None:
    """Insert ``rows`` (dicts keyed by column name, every row the same keys) into ``table``
    in one statement on PostgreSQL; ``on_conflict`` is the statement's ``ON CONFLICT …``
    clause, if any. Rows are inserted in the order given. ``also`` (a table, its rows and
    their ``ON CONFLICT`` clause) is written by the same statement, ahead of ``rows``, as a
    data-modifying CTE: one round trip for two tables."""
    if also is not None and not also[1]:
        also = None
    if not rows:
        if also is not None:
            insert(connection, also[0], also[1], on_conflict=also[2])
        return
    parameters = [dumps(rows)]
    sql = _statement(table, tuple(rows[0]), on_conflict)
    if also is not None:
        other, other_rows, other_conflict = also
        sql = f"WITH also AS ({_statement(other, tuple(other_rows[0]), other_conflict)}) {sql}"
        parameters.insert(0, dumps(other_rows))
    connection.exec_driver_sql(sql, tuple(parameters))


def dumps(rows: Sequence[Mapping[str, Any]]) -> str:
    """``rows`` as the one JSON parameter ``json_populate_recordset`` (or ``json_to_recordset``)
    reads. orjson encodes them ~10x faster than ``json`` (3 action rows: 5 µs against 53 µs)
    and writes times as ``isoformat`` does. Its ``OPT_NON_STR_KEYS`` takes the keys ``json``
    takes: a column's name is a ``str`` subclass when the column is named apart from its
    attribute (the actions' ``arguments``), which orjson refuses as a key without it. What it
    still refuses (an integer beyond 64 bits) is encoded by ``json``, as ``json`` would always
    have."""
    try:
        return orjson.dumps(rows, default=_json_value, option=orjson.OPT_NON_STR_KEYS).decode()
    except orjson.JSONEncodeError:
        return json.dumps(rows, default=_json_value)


def _json_value(value: Any) -> str:
    """Times as ISO 8601, which PostgreSQL reads back into a ``timestamp`` exactly."""
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not stored in a batch row")


@functools.cache
def _statement(table: Table, columns: tuple[str, ...], on_conflict: str) -> str:
    quote = _DIALECT.identifier_preparer.quote
    names = ", ".join(quote(name) for name in columns)
    return (
        f"INSERT INTO {quote(table.name)} ({names}) SELECT {names} "
        f"FROM json_populate_recordset(NULL::{quote(table.name)}, %s::json)"
        f"{' ' + on_conflict if on_conflict else ''}"
    )
