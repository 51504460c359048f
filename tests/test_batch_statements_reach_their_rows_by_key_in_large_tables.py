"""A group-commit batch's set statements read their rows from JSON (engine/recordset.py),
which PostgreSQL always estimates at 100 rows: joined to the engine's tables by key, that
estimate made it hash-join a scan of the whole table up to ~100,000 rows (a batch of
conclusions scanned every step row). Each statement also names its keys as an array,
which PostgreSQL reaches through the primary key."""

from __future__ import annotations

import re

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from engine import advancing, batch_conclusion, batch_spawning, founding

ROWS = 20_000


def _fill(session: Session) -> None:
    """ROWS actions, each with a step, an invocation and an achievement, and their statistics."""
    session.execute(
        text(
            "INSERT INTO stepwise_actions (actor_type, actor_id, name, arguments, status, current_step_index,"
            " checksum_key, concurrency_key, outbound, root, created_at, updated_at)"
            " SELECT 'Car', g::text, 'wash', '[]', 'succeeded', 0, '', 'Car/' || g, false, true, now(), now()"
            " FROM generate_series(1, :rows) AS g"
        ),
        {"rows": ROWS},
    )
    session.execute(
        text(
            "INSERT INTO stepwise_steps (action_id, definition_index, status, attempt, pending_actions_count,"
            " unsuccessful_actions_count, created_at, updated_at)"
            " SELECT id, 0, 'succeeded', 1, 0, 0, now(), now() FROM stepwise_actions"
        )
    )
    session.execute(
        text(
            "INSERT INTO stepwise_invocations"
            " (kind, actor_type, actor_id, name, arguments, action_id, created_at)"
            " SELECT 'action', actor_type, actor_id, name, '[]', id, now() FROM stepwise_actions"
        )
    )
    session.execute(
        text(
            "INSERT INTO stepwise_achievements (action_id, checksum_key, checksum, created_at, updated_at)"
            " SELECT id, 'Car/' || actor_id, 'x', now(), now() FROM stepwise_actions"
        )
    )
    tables = "stepwise_actions, stepwise_steps, stepwise_invocations, stepwise_achievements"
    session.execute(text(f"ANALYZE {tables}"))


def _generic_plan(session: Session, sql: str) -> str:
    """The plan PostgreSQL keeps for ``sql`` once prepared (its generic plan)."""
    numbered = iter(range(1, 100))
    prepared = re.sub(r"%s", lambda _: f"${next(numbered)}", sql)
    session.execute(text("SET LOCAL plan_cache_mode = force_generic_plan"))
    session.connection().exec_driver_sql(f"PREPARE batch_statement AS {prepared}")
    count = next(numbered) - 1
    nulls = ", ".join(["NULL"] * count)
    rows = session.connection().exec_driver_sql(f"EXPLAIN EXECUTE batch_statement({nulls})").all()
    session.connection().exec_driver_sql("DEALLOCATE batch_statement")
    return "\n".join(row[0] for row in rows)


STATEMENTS = {
    "completing": batch_conclusion._COMPLETED_SQL,
    "advancing": advancing._ADVANCE_ALL_SQL,
    "spawning": batch_spawning._SPAWNED_SQL,
    "founding": founding._FOUNDED_SQL,
}


@pytest.mark.postgresql_only
@pytest.mark.parametrize("name", sorted(STATEMENTS))
def test_a_batch_statement_reaches_its_rows_by_key_in_large_tables(session: Session, name: str) -> None:
    # Given 20,000 actions, steps, invocations and achievements
    _fill(session)

    # When PostgreSQL plans a batch's statement
    plan = _generic_plan(session, STATEMENTS[name])

    # Then no table of the engine is read whole
    scans = re.findall(r"Seq Scan on (stepwise_\w+)", plan)
    assert scans == [], plan
