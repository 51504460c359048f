"""Given a step body, when it runs, then it sees its actor row and its action's arguments
as the database holds them now: not as an earlier transaction of the same session left
them (sessions do not expire on commit), nor as an attempt that was rolled back left them.

Issue 9 (review §2.6): the action kept its loaded actor and arguments across rollbacks, so
a body run again after a deadlock saw (and persisted) what the failed attempt had changed.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

import engine
from engine import testing
from tests.domain import Car

#: The statement that writes the step after its body ran: on PostgreSQL the one that
#: completes its action writes it too (engine/completion.py ``Lane``).
STEP_WRITTEN = {"postgresql": "WITH step_written", "sqlite": "UPDATE stepwise_steps SET status"}


@contextmanager
def failing_once(sa_engine: Engine, statement: str) -> Iterator[list[str]]:
    """The first statement starting with ``statement`` fails as a deadlock victim's (on
    PostgreSQL, raised by the server) or a busy SQLite file's would."""
    failed: list[str] = []

    def fail(_conn: Any, cursor: Any, sql: str, _params: Any, _context: Any, _many: bool) -> None:
        if failed or not sql.lstrip().startswith(statement):
            return
        failed.append(sql)
        if sa_engine.dialect.name == "postgresql":
            cursor.execute("DO $$ BEGIN RAISE EXCEPTION 'forced by the test' USING ERRCODE = '40P01'; END $$")
        raise sqlite3.OperationalError("database is locked")

    event.listen(sa_engine, "before_cursor_execute", fail)
    try:
        yield failed
    finally:
        event.remove(sa_engine, "before_cursor_execute", fail)


def stored_arguments(action_id: int) -> list[Any]:
    with engine.new_session() as fresh:
        found = fresh.get(engine.Action, action_id)
        assert found is not None
        return list(found.arguments)


def test_a_body_run_again_after_a_deadlock_sees_the_arguments_as_stored(
    session: Session, car: Car, database: Engine
) -> None:
    # Given a body that adds an argument, and writes (so its outcome commits with its
    # writes, in its own transaction)
    seen: list[list[Any]] = []
    pack = engine.define(Car, "pack")

    @pack.step
    def add_luggage(car: Car, step: engine.StepContext, *items: str) -> None:
        seen.append(list(step.action.arguments))
        step.action.arguments.append("suitcase")
        car.honk()

    engine.later(car, "pack", "map")
    session.commit()

    # When the body's transaction fails after the body ran, and runs again
    with failing_once(database, STEP_WRITTEN[database.dialect.name]) as failed:
        testing.drain()

    # Then the second run saw the arguments as stored, and added its argument once
    assert failed
    assert seen == [["map"], ["map"]]
    action = session.scalars(select(engine.Action)).one()
    assert action.status == "succeeded"
    assert stored_arguments(action.id) == ["map", "suitcase"]


def test_a_body_that_failed_with_a_database_error_leaves_the_arguments_as_stored(
    session: Session, car: Car
) -> None:
    # Given a body that adds an argument, then fails with a database error (its work is
    # rolled back before the failure is recorded)
    pack = engine.define(Car, "pack")

    @pack.step
    def add_luggage(car: Car, step: engine.StepContext, *items: str) -> None:
        step.action.arguments.append("suitcase")
        raise OperationalError("UPDATE luggage", None, Exception("the boot is stuck"))

    # When it is performed
    with testing.handle_exceptions():
        action = engine.now(car, "pack", "map")

    # Then the action failed with the arguments it had before the failed attempt
    assert action.status == "failed"
    assert action.error_class == "sqlalchemy.exc.OperationalError"
    assert stored_arguments(action.id) == ["map"]


def test_a_body_reads_its_actor_as_stored_now(session: Session, car: Car) -> None:
    # Given the car as the test session loaded it, then changed by another transaction
    assert car.mileage == 0
    with engine.new_session() as other:
        other.execute(update(Car).where(Car.id == car.id).values(mileage=100))
        other.commit()

    # When a body drives it, in the session holding the old copy
    action = engine.now(car, "drive", 5)

    # Then the body drove the car as stored: no update was lost
    assert action.status == "succeeded"
    assert car.mileage == 105
    with engine.new_session() as fresh:
        assert fresh.scalar(select(Car.mileage)) == 105
