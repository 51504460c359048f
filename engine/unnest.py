"""Set-based writes: many rows in one statement whose text does not depend on how many.

On PostgreSQL a batch of rows is inserted as ``INSERT … SELECT … FROM unnest(%(a)s::bigint[],
%(b)s::varchar[], …)``: one array per column. The text is the same for one row or sixty-four,
so psycopg prepares it once per connection and PostgreSQL plans it once, where a multi-row
``VALUES`` has a text (and a plan) per number of rows and SQLAlchemy compiles each one
afresh. River and Graphile Worker write their batches the same way
(``throughput-designs.md``). SQLite has no arrays: its callers keep SQLAlchemy's insert.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import JSON, Table
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Connection

_DIALECT = postgresql.dialect()  # type: ignore[no-untyped-call]


def insert(
    connection: Connection, table: Table, rows: Sequence[Mapping[str, Any]], *, on_conflict: str = ""
) -> None:
    """Insert ``rows`` (dicts keyed by column name, every row the same keys) into ``table``
    in one statement on PostgreSQL; ``on_conflict`` is the statement's ``ON CONFLICT …``
    clause, if any. Rows are inserted in the order given."""
    if not rows:
        return
    columns = tuple(rows[0])
    sql, json_columns = _statement(table, columns, on_conflict)
    arrays: dict[str, list[Any]] = {column: [row[column] for row in rows] for column in columns}
    for column in json_columns:
        arrays[column] = [None if value is None else json.dumps(value) for value in arrays[column]]
    connection.exec_driver_sql(sql, arrays)


@functools.cache
def _statement(table: Table, columns: tuple[str, ...], on_conflict: str) -> tuple[str, tuple[str, ...]]:
    json_columns = tuple(name for name in columns if isinstance(table.c[name].type, JSON))
    quote = _DIALECT.identifier_preparer.quote
    arrays = ", ".join(f"%({name})s::{_array_type(table, name, json_columns)}" for name in columns)
    values = ", ".join(f"{quote(name)}::json" if name in json_columns else quote(name) for name in columns)
    names = ", ".join(quote(name) for name in columns)
    sql = (
        f"INSERT INTO {quote(table.name)} ({names}) SELECT {values} FROM unnest({arrays}) AS batch({names})"
        f"{' ' + on_conflict if on_conflict else ''}"
    )
    return sql, json_columns


def _array_type(table: Table, name: str, json_columns: tuple[str, ...]) -> str:
    # JSON travels as text and is cast per value: psycopg sends strings as text[].
    element = "text" if name in json_columns else table.c[name].type.compile(dialect=_DIALECT)
    return f"{element}[]"
