"""The tables a seeding fills: their secondary indexes (dropped during the load, rebuilt
after), their id sequences, row counts and ``VACUUM ANALYZE``.
"""

from __future__ import annotations

from typing import Any

import psycopg

from bench.common import max_id, say

TABLES = (
    "stepwise_actions",
    "stepwise_steps",
    "stepwise_invocations",
    "stepwise_step_actions",
    "stepwise_action_events",
    "stepwise_performances",
    "stepwise_achievements",
    "bench_trees",
)


def first_free(connection: psycopg.Connection[Any], table: str) -> int:
    return max_id(connection, table) + 1


def secondary_indexes(connection: psycopg.Connection[Any]) -> list[tuple[str, str]]:
    """The indexes not backing a constraint (primary keys and unique constraints stay)."""
    rows = connection.execute(
        "SELECT indexname, indexdef FROM pg_indexes i WHERE schemaname = current_schema() "
        "AND tablename = ANY(%s) "
        "AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conname = i.indexname)",
        (list(TABLES),),
    ).fetchall()
    return [(str(name), str(definition)) for name, definition in rows]


def drop_indexes(connection: psycopg.Connection[Any], indexes: list[tuple[str, str]]) -> None:
    """Drop ``secondary_indexes`` for the load (inside its transaction)."""
    for name, _ in indexes:
        connection.execute(f'DROP INDEX "{name}"')


def rebuild_indexes(connection: psycopg.Connection[Any], indexes: list[tuple[str, str]]) -> None:
    """Recreate the indexes ``drop_indexes`` dropped, from their definitions."""
    say(f"rebuilding {len(indexes)} indexes ...")
    for _, definition in indexes:
        connection.execute(definition)


def reset_sequences(connection: psycopg.Connection[Any]) -> None:
    for table in TABLES:
        if table == "stepwise_step_actions":
            continue
        connection.execute(
            f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
            f"greatest((SELECT max(id) FROM {table}), 1))"
        )


def counts(connection: psycopg.Connection[Any]) -> dict[str, int]:
    result = {}
    for table in TABLES:
        row = connection.execute(f"SELECT count(*) FROM {table}").fetchone()
        result[table] = int(row[0]) if row else 0
    return result


def vacuum_analyze(connection: psycopg.Connection[Any]) -> None:
    say("VACUUM ANALYZE ...")
    for table in TABLES:
        connection.execute(f"VACUUM ANALYZE {table}")
