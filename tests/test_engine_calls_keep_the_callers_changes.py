"""Given a caller's session holding changes of its own, when an engine call runs in it
(``complete``, ``complete_action``, ``now``, an operator command given ``session=``) and
the database makes the engine's work fail with a retryable error, then only the engine's
work is rolled back and run again: the caller's changes are committed with it, as if
nothing had failed. An error that is not retried leaves them pending in the session.

Issue 9 (review §2.4). The failures are real where a test can make them so: a deadlock
between two PostgreSQL transactions, a SQLite file another connection holds the write lock
of; elsewhere one statement is made to fail as the database would (an error raised by the
server itself on PostgreSQL, which aborts the transaction like a real deadlock).
"""

from __future__ import annotations

import sqlite3
import threading
import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event, func, select, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

import engine
from engine import db
from engine.history import ActionEvent
from tests.domain import Account, Car


@pytest.fixture(autouse=True)
def paint(database: Engine) -> None:
    engine.define(Car, "paint", lambda car, color: None, outbound=True)


@pytest.fixture
def painting(session: Session, car: Car) -> int:
    """The id of an outbound paint action on the car, performing until completed."""
    action = engine.now(car, "paint", "red")
    assert action.status == "performing"
    return action.id


def make_callers_changes(session: Session, car: Car) -> None:
    """What a web request or a job did in its session before calling the engine: a change
    to a row it holds and a new row, neither of them flushed yet."""
    car.mileage = 42
    session.add(Account(name="added by the caller"))


def assert_callers_changes_committed() -> None:
    with engine.new_session() as fresh:
        assert fresh.scalar(select(Car.mileage)) == 42
        assert fresh.scalars(select(Account.name)).all() == ["added by the caller"]


def events(action_id: int, name: str) -> int:
    with engine.new_session() as fresh:
        return (
            fresh.scalar(
                select(func.count())
                .select_from(ActionEvent)
                .where(ActionEvent.action_id == action_id, ActionEvent.event == name)
            )
            or 0
        )


def action_status(action_id: int) -> str:
    with engine.new_session() as fresh:
        found = fresh.get(engine.Action, action_id)
        assert found is not None
        return found.status


#: The statement that closes the completed action's lane: on PostgreSQL it is the one that
#: completes the action (engine/performance.py ``closing``), on SQLite one of its own.
LANE_CLOSED = {"postgresql": "WITH completed AS", "sqlite": "DELETE FROM stepwise_performances"}


@contextmanager
def failing_once(sa_engine: Engine, statement: str, sqlstate: str = "40P01") -> Iterator[list[str]]:
    """The first statement starting with ``statement`` fails as the database would fail
    it: on PostgreSQL the server raises ``sqlstate`` (a deadlock by default), aborting the
    transaction; on SQLite the driver reports a busy database (or, for an integrity
    violation ``23505``, a constraint failure)."""
    failed: list[str] = []

    def fail(_conn: Any, cursor: Any, sql: str, _params: Any, _context: Any, _many: bool) -> None:
        if failed or not sql.lstrip().startswith(statement):
            return
        failed.append(sql)
        if sa_engine.dialect.name == "postgresql":
            cursor.execute(
                f"DO $$ BEGIN RAISE EXCEPTION 'forced by the test' USING ERRCODE = '{sqlstate}'; END $$"
            )
        if sqlstate == "23505":
            raise sqlite3.IntegrityError("UNIQUE constraint failed (forced by the test)")
        raise sqlite3.OperationalError("database is locked")

    event.listen(sa_engine, "before_cursor_execute", fail)
    try:
        yield failed
    finally:
        event.remove(sa_engine, "before_cursor_execute", fail)


#: Engine calls on the caller's session that complete the painting, and the status they
#: leave it with. Each leaves the paint lane, whose row is then deleted.
COMPLETIONS: dict[str, tuple[Callable[[Session, Car, int], Any], str]] = {
    "complete": (lambda session, car, action_id: engine.complete(car, "paint"), "succeeded"),
    "complete_action": (
        lambda session, car, action_id: engine.complete_action(action_id, session=session),
        "succeeded",
    ),
    "complete_action given the action": (
        lambda session, car, action_id: engine.complete_action(session.get(engine.Action, action_id)),
        "succeeded",
    ),
    "commands.complete": (
        lambda session, car, action_id: engine.commands.complete(action_id, "failed", session=session),
        "failed",
    ),
    "commands.cancel": (
        lambda session, car, action_id: engine.commands.cancel(action_id, session=session),
        "cancelled",
    ),
}


@pytest.mark.parametrize("call", COMPLETIONS)
def test_a_completion_retried_after_a_deadlock_commits_the_callers_changes_with_it(
    session: Session, car: Car, painting: int, database: Engine, call: str
) -> None:
    complete, completed_as = COMPLETIONS[call]
    # Given changes the caller has not committed
    make_callers_changes(session, car)

    # When the engine's work fails once, as a deadlock victim's would, and is retried
    with failing_once(database, LANE_CLOSED[database.dialect.name]) as failed:
        result = complete(session, car, painting)

    # Then the completion happened once, and the caller's changes were committed with it
    assert failed and result
    assert action_status(painting) == completed_as
    assert events(painting, "completed") == 1  # the failed attempt's history is gone with it
    assert_callers_changes_committed()
    assert not session.in_transaction()


def test_now_retried_after_a_deadlock_commits_the_callers_changes(
    session: Session, car: Car, database: Engine
) -> None:
    # Given changes the caller has not committed
    make_callers_changes(session, car)

    # When the invocation's insert fails once as a deadlock victim's would
    with failing_once(database, "INSERT INTO stepwise_invocations") as failed:
        action = engine.now(car, "honk")

    # Then the action ran, and the caller's changes were committed first, as documented
    assert failed
    assert action.status == "succeeded"
    assert_callers_changes_committed()
    with engine.new_session() as fresh:
        assert fresh.scalar(select(Car.honks)) == 1


def test_an_error_that_is_not_retried_leaves_the_callers_changes_in_their_session(
    session: Session, car: Car, painting: int, database: Engine
) -> None:
    # Given changes the caller has not committed
    make_callers_changes(session, car)

    # When the engine's work fails with an error that running it again would not cure
    with (
        failing_once(database, LANE_CLOSED[database.dialect.name], sqlstate="23505"),
        pytest.raises(IntegrityError),
    ):
        engine.complete_action(painting, session=session)

    # Then nothing of the engine's work remains, and the caller's changes are still theirs
    # to commit (or roll back)
    assert session.in_transaction()
    assert car.mileage == 42
    session.commit()
    assert_callers_changes_committed()
    assert action_status(painting) == "performing"
    assert events(painting, "completed") == 0


@pytest.mark.postgresql_only
def test_a_real_deadlock_while_completing_keeps_the_callers_changes(
    session: Session, car: Car, painting: int, database: Engine
) -> None:
    """Two transactions take the lane and the action row in opposite orders: PostgreSQL
    aborts one of them. The engine's (the quicker to check) is made the victim."""
    errors: list[str | None] = []

    def record(context: Any) -> None:
        errors.append(getattr(context.original_exception, "sqlstate", None))

    event.listen(database, "handle_error", record)

    # Given changes the caller has flushed (holding the car's row) and one not yet flushed
    car.mileage = 42
    session.flush()
    session.add(Account(name="added by the caller"))
    session.execute(text("SET LOCAL deadlock_timeout = '300ms'"))

    # And a rival transaction that holds the action's row, then wants its lane
    holding = threading.Event()
    rival_done = threading.Event()

    def rival() -> None:
        with database.connect() as connection:
            connection.execute(text("SET LOCAL deadlock_timeout = '30s'"))
            connection.execute(
                text("SELECT id FROM stepwise_actions WHERE id = :id FOR UPDATE"), {"id": painting}
            )
            holding.set()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:  # until the engine waits for the action's row
                waiting = connection.execute(text("SELECT count(*) FROM pg_locks WHERE NOT granted")).scalar()
                if waiting:
                    break
                time.sleep(0.005)
            lane = text("SELECT id FROM stepwise_performances WHERE action_id = :id FOR UPDATE")
            connection.execute(lane, {"id": painting})
            connection.rollback()
        rival_done.set()

    thread = threading.Thread(target=rival)
    thread.start()
    assert holding.wait(10)

    # When the caller completes the painting: the engine holds the lane, waits for the
    # action's row, and is chosen as the deadlock's victim
    try:
        completion = engine.complete(car, "paint")
    finally:
        thread.join(20)
        event.remove(database, "handle_error", record)

    # Then its work ran again once the rival was gone, and the caller's changes survived
    assert rival_done.is_set()
    assert "40P01" in errors
    assert completion
    assert action_status(painting) == "succeeded"
    assert events(painting, "completed") == 1
    assert_callers_changes_committed()


@pytest.mark.sqlite_only
def test_a_busy_database_while_completing_keeps_the_callers_changes(
    session: Session, car: Car, painting: int, database: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another connection holds SQLite's write lock; the engine's attempt to take it times
    out (after 50 ms here, 30 s by default), and the next attempt finds it free."""
    # Given changes the caller has not flushed
    make_callers_changes(session, car)

    # And another writer holding the database, until the engine pauses between attempts
    blocker = sqlite3.connect(str(database.url.database), isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    pauses: list[float] = []

    def pause(seconds: float) -> None:
        if not pauses:
            blocker.execute("COMMIT")
        pauses.append(seconds)

    monkeypatch.setattr(db, "time", types.SimpleNamespace(sleep=pause, monotonic=time.monotonic))
    dbapi_connection = session.connection().connection.dbapi_connection
    assert dbapi_connection is not None
    dbapi_connection.execute("PRAGMA busy_timeout = 50")

    # When the caller completes the painting
    try:
        completion = engine.complete(car, "paint")
    finally:
        dbapi_connection.execute("PRAGMA busy_timeout = 30000")
        blocker.close()

    # Then the engine waited once and tried again, and the caller's changes survived
    assert len(pauses) == 1
    assert completion
    assert action_status(painting) == "succeeded"
    assert_callers_changes_committed()


def test_a_savepoint_keeps_its_events_and_messages_for_the_commit_or_drops_them_with_it(
    session: Session, car: Car
) -> None:
    """What a SAVEPOINT records for the commit (history events, broker messages) goes out
    when the whole transaction commits, not when the SAVEPOINT is released; a SAVEPOINT
    rolled back takes its own away and leaves the ones recorded before it."""
    from engine import broker, history, jobs, testing

    # Given an event and a message recorded before two SAVEPOINTs
    history.record(session, None, "before_the_savepoints", invocation_id=1)
    broker.enqueue(session, jobs.admit, 1)

    # When one SAVEPOINT records its own and is released, and another is rolled back
    with session.begin_nested():
        history.record(session, None, "in_the_released_savepoint", invocation_id=2)
        broker.enqueue(session, jobs.admit, 2)
    rolled_back = session.begin_nested()
    history.record(session, None, "in_the_rolled_back_savepoint", invocation_id=3)
    broker.enqueue(session, jobs.admit, 3)
    rolled_back.rollback()

    # Then nothing went out yet
    assert testing.enqueued() == []
    with engine.new_session() as fresh:
        assert fresh.scalar(select(func.count()).select_from(ActionEvent)) == 0

    # When the transaction commits
    session.commit()

    # Then what the released SAVEPOINT and the transaction recorded went out, once
    assert [queued.args for queued in testing.enqueued()] == [(1,), (2,)]
    with engine.new_session() as fresh:
        assert fresh.scalars(select(ActionEvent.event).order_by(ActionEvent.id)).all() == [
            "before_the_savepoints",
            "in_the_released_savepoint",
        ]
