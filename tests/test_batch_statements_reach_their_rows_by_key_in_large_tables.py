"""A group-commit batch's set statements read their rows from JSON (engine/recordset.py),
which PostgreSQL always estimates at 100 rows: joined to the engine's tables by key, that
estimate made it hash-join a scan of the whole table up to ~100,000 rows (a batch of
conclusions scanned every step row). Each statement also names its keys as an array,
which PostgreSQL reaches through the primary key."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.orm import Session

from engine import (
    advancing,
    batch_admission,
    batch_conclusion,
    batch_spawning,
    claiming,
    founding,
    performance,
)
from engine.performance import Performance

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
    """The plan PostgreSQL keeps for ``sql`` once prepared (its generic plan). Parameters
    are ``%s`` or ``%(name)s``."""
    numbers: dict[str, int] = {}

    def number(found: re.Match[str]) -> str:
        name = found.group(1) or f"#{len(numbers)}"
        return f"${numbers.setdefault(name, len(numbers) + 1)}"

    prepared = re.sub(r"%(?:\((\w+)\))?s", number, sql)
    session.execute(text("SET LOCAL plan_cache_mode = force_generic_plan"))
    session.connection().exec_driver_sql(f"PREPARE batch_statement AS {prepared}")
    count = len(numbers)
    nulls = ", ".join(["NULL"] * count)
    rows = session.connection().exec_driver_sql(f"EXPLAIN EXECUTE batch_statement({nulls})").all()
    session.connection().exec_driver_sql("DEALLOCATE batch_statement")
    return "\n".join(row[0] for row in rows)


def _sent(session: Session, call: Callable[[], object]) -> str:
    """The text of the statement ``call`` sends, as it reaches psycopg."""
    sent: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        sent.append(statement)

    event.listen(session.get_bind(), "before_cursor_execute", record)
    try:
        call()
    finally:
        event.remove(session.get_bind(), "before_cursor_execute", record)
    (statement,) = sent
    return statement


STATEMENTS = {
    "completing": batch_conclusion._COMPLETED_SQL,
    "advancing": advancing._ADVANCE_ALL_SQL,
    "spawning": batch_spawning._SPAWNED_SQL,
    "founding": founding._FOUNDED_SQL,
}
#: Statements sent through SQLAlchemy, their text as sent (a lane's live statuses written in).
SENT: dict[str, Callable[[Session], object]] = {
    # A lane removed when its last member completes alone (outside a batch)
    "closing a lane": lambda session: performance.close_if_empty(
        session, Performance(id=1, concurrency_key="Car/1"), 1
    ),
    "a lane's next member": lambda session: session.scalars(
        performance._UPCOMING, {"key": "Car/1", "completing_id": 1}
    ).all(),
}


#: A batch's claims of the steps its worker runs (engine/claiming.py): their read and lock,
#: and the claim; and its admissions' read and lock of their invocations.
CLAIMING: dict[str, Callable[[Session], object]] = {
    "claiming steps: the read": lambda session: claiming._lock(session, [1, 2]),
    "claiming steps: the claim": lambda session: session.execute(
        claiming._leased("postgresql"), {"ids": [1, 2], "until": None}
    ),
    "admitting: the invocations' read": lambda session: batch_admission.lock_all(session, [1, 2]),
}


def _plan(session: Session, name: str) -> str:
    """The generic plan of the statement ``name`` names (STATEMENTS, SENT or CLAIMING)."""
    if name in STATEMENTS:
        return _generic_plan(session, STATEMENTS[name])
    call = SENT.get(name) or CLAIMING[name]
    return _generic_plan(session, _sent(session, lambda: call(session)))


@pytest.mark.postgresql_only
@pytest.mark.parametrize("name", sorted(STATEMENTS) + sorted(SENT) + sorted(CLAIMING))
def test_a_batch_statement_reaches_its_rows_by_key_in_large_tables(session: Session, name: str) -> None:
    # Given 20,000 actions, steps, invocations and achievements
    _fill(session)

    # When PostgreSQL plans a batch's statement
    plan = _plan(session, name)

    # Then no table of the engine is read whole
    scans = re.findall(r"Seq Scan on (stepwise_\w+)", plan)
    assert scans == [], plan


@pytest.mark.postgresql_only
@pytest.mark.parametrize("name", sorted(STATEMENTS) + sorted(SENT) + sorted(CLAIMING))
def test_a_batch_statement_reads_no_index_whole_when_statistics_say_nothing_is_live(
    session: Session, name: str
) -> None:
    # Given 20,000 actions, all ended when their statistics were taken: PostgreSQL then
    # holds the indexes of live rows (pending and performing actions, unsettled
    # invocations, ...) for empty, however many rows a burst of work puts in them later
    _fill(session)

    # When PostgreSQL plans a batch's statement
    plan = _plan(session, name)

    # Then each index it reads is probed by key, never read whole: a whole read of a
    # partial index of live actions costs as many rows as are live, for every row of the
    # batch (at 1,000,000 actions of history that doubled PostgreSQL's CPU per action)
    whole = [
        node
        for node in re.split(r"\n(?=\s*->)", plan)
        if re.search(r"Index (Only )?Scan using \w+ on stepwise_\w+", node) and "Index Cond" not in node
    ]
    assert whole == [], plan


@pytest.mark.postgresql_only
@pytest.mark.parametrize("name", sorted(SENT))
def test_a_lanes_live_members_are_found_without_reading_its_history(session: Session, name: str) -> None:
    # Given a lane whose key has 20,000 ended actions and one live
    session.execute(
        text(
            "INSERT INTO stepwise_actions (actor_type, actor_id, name, arguments, status, current_step_index,"
            " checksum_key, concurrency_key, outbound, root, created_at, updated_at)"
            " SELECT 'Car', '1', 'wash', '[]', CASE WHEN g = :rows THEN 'pending' ELSE 'succeeded' END, 0,"
            " '', 'Car/1', false, true, now(), now() FROM generate_series(1, :rows) AS g"
        ),
        {"rows": ROWS},
    )
    session.execute(text("ANALYZE stepwise_actions"))

    # When PostgreSQL plans a statement that looks for its live members, as it is sent
    plan = _plan(session, name)

    # Then it probes the lane index (live members only) by key: with the statuses sent as
    # parameters the plan PostgreSQL keeps could not use that index, and read every action
    # the key ever had
    assert re.search(
        r"Index (Only )?Scan using ix_stepwise_actions_lane on stepwise_actions \w*.*\n\s*Index Cond: "
        r"\(\(?concurrency_key",
        plan,
    ), plan


@pytest.mark.postgresql_only
@pytest.mark.parametrize("name", sorted(STATEMENTS) + sorted(SENT) + sorted(CLAIMING))
def test_a_batch_statement_never_finds_its_actions_by_status_in_a_young_table(
    session: Session, name: str
) -> None:
    # Given 3,000 performing actions with their steps in tables whose statistics were never
    # taken, as in the first minutes of a deployment (or of a benchmark's fresh database)
    session.execute(
        text(
            "INSERT INTO stepwise_actions (actor_type, actor_id, name, arguments, status, current_step_index,"
            " checksum_key, concurrency_key, outbound, root, created_at, updated_at)"
            " SELECT 'Car', g::text, 'wash', '[]', 'performing', 0, '', 'Car/' || g, false, true,"
            " now(), now() FROM generate_series(1, 3000) AS g"
        )
    )
    session.execute(
        text(
            "INSERT INTO stepwise_steps (action_id, definition_index, status, attempt, pending_actions_count,"
            " unsuccessful_actions_count, created_at, updated_at)"
            " SELECT id, 0, 'performing', 1, 0, 0, now(), now() FROM stepwise_actions"
        )
    )

    # When PostgreSQL plans a batch's statement
    plan = _plan(session, name)

    # Then no action's status is an index condition: probing an index of statuses for
    # "performing" once per action of the batch read every performing action each time
    # (2,400-2,700 rows a probe in bench/throughput.py, before its tables were analyzed)
    assert not re.search(r"Index Cond: \(+\(?status\)?", plan), plan
