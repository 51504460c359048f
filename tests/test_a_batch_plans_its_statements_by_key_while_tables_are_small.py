"""A connection keeps its statements prepared, and PostgreSQL keeps a prepared statement's
plan until a table's statistics change. A plan made while the tables were small read them
whole, and went on reading them whole as they grew (in bench/throughput.py, ~2,700 rows per
action until autovacuum's first ANALYZE). A group-commit batch therefore plans without
sequential scans where an index serves (``engine.db.plan_by_key``), for its transaction
only."""

from __future__ import annotations

import re

import pytest
from sqlalchemy import select, text
from sqlalchemy.orm import Session, object_session

import engine
from engine import db, performance, status, testing
from engine.completing import complete_action
from engine.group_commit import GroupCommit
from tests.domain import Car
from tests.test_batch_statements_reach_their_rows_by_key_in_large_tables import (
    CLAIMING,
    SENT,
    STATEMENTS,
    _generic_plan,
    _plan,
    _sent,
)

#: An admission's read and lock of its lanes (no lane in the tables of the other tests).
LANES = "admitting: the lanes' read"


@pytest.mark.postgresql_only
@pytest.mark.parametrize("name", sorted(STATEMENTS) + sorted(SENT) + sorted(CLAIMING) + [LANES])
def test_a_batch_statement_planned_on_empty_tables_reads_none_whole(session: Session, name: str) -> None:
    # Given empty tables whose statistics were never taken, in a batch's transaction
    db.plan_by_key(session)

    # When PostgreSQL makes the plan it keeps for a batch's statement
    if name == LANES:
        plan = _generic_plan(session, _sent(session, lambda: performance.lock_all(session, {"Car/1"})))
    else:
        plan = _plan(session, name)

    # Then it reads no table of the engine whole, so it still probes by key once the
    # tables hold thousands of rows
    assert re.findall(r"Seq Scan on (stepwise_\w+)", plan) == [], plan


@pytest.mark.postgresql_only
def test_planning_by_key_ends_with_the_batchs_transaction() -> None:
    # Given a process's group commit, on a pool of connections
    # When a batch reads the setting, and then plain sessions (a step body's, the studio's)
    in_batch, _, _ = GroupCommit().run(_setting)
    afterwards = set()
    for _ in range(12):  # the pool hands its connections out in turn: the batch's among them
        with engine.new_session() as plain:
            afterwards.add(_setting(plain))

    # Then the batch planned without sequential scans, and nothing after it does
    assert in_batch == "off"
    assert afterwards == {"on"}


def test_planning_by_key_changes_nothing_on_sqlite(session: Session) -> None:
    # Given any backend, when a transaction asks to plan by key, then it goes on as before
    db.plan_by_key(session)
    assert session.scalar(text("SELECT 1")) == 1


@pytest.mark.postgresql_only
def test_an_actions_callbacks_in_a_batch_plan_as_postgresql_does_by_default(session: Session) -> None:
    # Given an outbound action whose succeeded callback notes how its queries are planned
    paint = engine.define(Car, "paint", outbound=True)
    seen: list[str] = []

    @paint.step
    def order(car: Car, step: engine.StepContext) -> None:
        pass

    @paint.succeeded
    def invoice(car: Car, action: engine.Action) -> None:
        seen.append(_setting(object_session(car)))

    car = Car()
    session.add(car)
    session.commit()
    engine.later(car, "paint")
    session.commit()
    testing.drain()
    action_id = session.scalars(select(engine.Action.id)).one()

    # When a batch completes it, and goes on with its own statements
    def work(batch: Session) -> str:
        complete_action(batch, batch.get(engine.Action, action_id), status.SUCCEEDED)
        return _setting(batch)

    after, _, _ = GroupCommit().run(work)

    # Then the user's callback planned as usual (its queries may need to read a table
    # whole), and the batch's statements after it by key again
    assert (seen, after) == (["on"], "off")


def _setting(session: Session | None) -> str:
    assert session is not None
    return str(session.scalar(text("SELECT current_setting('enable_seqscan')")))
