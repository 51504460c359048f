"""The statements a worker sends for nearly every action (a step's lease, the lanes a
batch locks, the actors an admission reads) go through psycopg alone on PostgreSQL, their
objects made from the rows (engine/rows.py): they must be what a query would have loaded,
every column as stored, persistent and unchanged in the session, their relationships
loading as usual, and a lease a row lock that another worker skips. Where making them so
would differ from loading them (rows the session holds already, an actor class whose
loading runs code or joins a collection), the ORM reads them."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import event, select, update
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.orm import Mapped, Session, column_property, mapped_column, reconstructor

import engine
from engine import batch_admission, clock, concluding, db, lease, performance, registry, rows, testing
from engine.group_commit import Unit
from engine.models import Action, Invocation, Performance, Step
from engine.step_context import StepContext
from tests.domain import Account, AppBase, Car, Fleet, Van


class Logbook(engine.Actor, AppBase):
    """An actor whose class runs code when a row is loaded."""

    __tablename__ = "logbooks"

    id: Mapped[int] = mapped_column(primary_key=True)
    pages: Mapped[int] = mapped_column(default=0)

    @reconstructor
    def _opened(self) -> None:
        self.opened = True


def read(actor: Any) -> int:
    return 0


@pytest.fixture(autouse=True)
def declare() -> None:
    for cls in (Car, Fleet, Logbook):
        engine.define(cls, "read", read)
    trip = engine.define(Car, "trip")

    @trip.step
    def go(car: Car, step: StepContext) -> None:
        step.do("read")
        step.do("read")


def opened(session: Session, actor: Any) -> int:
    """The step of a new action on ``actor``, admitted and not run."""
    engine.later(actor, "read")
    session.commit()
    invocation = session.scalars(select(Invocation.id).where(Invocation.settled_at.is_(None))).one()
    with db.transaction() as own:
        batch_admission.admit_all(own, [Unit(None, batch_admission.admit_all, (invocation,))])
    return session.scalars(select(Step.id).where(Step.performed_at.is_(None))).one()


def trip_started(session: Session, car: Car) -> tuple[list[int], Step]:
    """A trip admitted and its body run: its two children invoked, not yet admitted (their
    invocations' ids) and the trip's performed step."""
    engine.later(car, "trip")
    session.commit()
    testing.perform_enqueued()
    children = sorted(session.scalars(select(Invocation.id).where(Invocation.settled_at.is_(None))))
    return children, session.scalars(select(Step).where(Step.performed_at.is_not(None))).one()


def columns(instance: Any) -> dict[str, Any]:
    return {prop.key: getattr(instance, prop.key) for prop in sa_inspect(type(instance)).column_attrs}


@pytest.fixture
def statements(database: Any) -> Iterator[list[str]]:
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(" ".join(statement.split()))

    event.listen(database, "before_cursor_execute", record)
    yield seen
    event.remove(database, "before_cursor_execute", record)


def test_the_step_its_action_and_its_actor_hold_every_column_as_stored(
    session: Session, statements: list[str]
) -> None:
    # Given a car, and a step on it whose rows hold JSON, fractions and times
    car = Car(mileage=12, location="garage")
    session.add(car)
    session.commit()
    step_id = opened(session, car)
    deadline = (clock.now() + timedelta(hours=1)).replace(microsecond=123456)
    with db.transaction() as own:
        own.execute(update(Step).where(Step.id == step_id).values(result={"seats": [1, "two", None]}))
        own.execute(update(Action).values(timeout_seconds=0.5, deadline_at=deadline, arguments_json=[3, "x"]))

    # When a fresh session takes its lease, guessing the car
    with db.session() as leased, db.session() as loaded:
        statements.clear()
        step, action, actor = lease.take(leased, step_id, Car, car.id)

        # Then one statement read them, and every column is what a query loads
        assert len(statements) == 1 and "stepwise_steps" in statements[0] and "cars" in statements[0]
        assert columns(step) == columns(loaded.get(Step, step_id))
        assert columns(action) == columns(loaded.get(Action, step.action_id))
        assert columns(actor) == columns(loaded.get(Car, car.id))
        assert (step.result, action.timeout_seconds, action.deadline_at) == (
            {"seats": [1, "two", None]},
            0.5,
            deadline,
        )
        assert isinstance(action.deadline_at, datetime) and action.arguments == [3, "x"]

        # and they are persistent and unchanged, their relationships found in the session
        for instance in (step, action, actor):
            assert sa_inspect(instance).persistent and not sa_inspect(instance).modified
        assert not leased.dirty and not leased.new
        statements.clear()
        assert step.action is action
        assert statements == []

        # and a change to one is written as an UPDATE of its row alone
        actor.mileage = 13
        leased.flush()
        assert len(statements) == 1 and statements[0].startswith("UPDATE cars SET mileage")
        leased.commit()
    session.expire_all()
    assert session.get(Car, car.id).mileage == 13


def test_no_actor_is_read_when_none_was_guessed_or_the_guess_has_no_row(session: Session, car: Car) -> None:
    step_id = opened(session, car)
    with db.session() as leased:
        assert lease.take(leased, step_id)[2] is None
    with db.session() as leased:
        step, action, actor = lease.take(leased, step_id, Car, car.id + 1000)
        assert (step.id, action.id, actor) == (step_id, step.action_id, None)


@pytest.mark.postgresql_only
def test_a_lease_another_session_holds_is_not_taken(session: Session, car: Car) -> None:
    step_id = opened(session, car)
    with db.session() as first, db.session() as second:
        assert lease.take(first, step_id, Car, car.id) is not None
        assert lease.take(second, step_id, Car, car.id) is None
        first.rollback()  # the lease released
        assert lease.take(second, step_id, Car, car.id) is not None


def test_a_session_that_holds_the_rows_already_reads_them_afresh(session: Session, car: Car) -> None:
    # Given a session that loaded the step (an attempt that was rolled back, say)
    step_id = opened(session, car)
    with db.session() as leased:
        held = leased.get(Step, step_id)
        assert held is not None and held.attempt == 1
        with db.transaction() as own:  # the row changes meanwhile
            own.execute(update(Step).where(Step.id == step_id).values(attempt=3))

        # When it takes the lease
        step, _, actor = lease.take(leased, step_id, Car, car.id)

        # Then it has the same objects, as the database holds them now
        assert step is held and step.attempt == 3
        assert actor is leased.get(Car, car.id)


@pytest.mark.parametrize("kind", ["a class that runs code on load", "a class that joins a collection"])
def test_an_actor_class_whose_loading_does_more_is_loaded_by_the_orm(session: Session, kind: str) -> None:
    actor: Any = Logbook(id=1) if kind.endswith("on load") else Fleet(id=1, vans=[Van(id=1), Van(id=2)])
    session.add(actor)
    session.commit()
    step_id = opened(session, actor)
    with db.session() as leased:
        _, _, read_actor = lease.take(leased, step_id, type(actor), 1)
        if isinstance(read_actor, Logbook):
            assert read_actor.opened is True
        else:
            assert [van.id for van in read_actor.vans] == [1, 2]


@pytest.mark.postgresql_only
def test_the_lanes_a_batch_locks_are_read_afresh_when_the_session_holds_them(
    session: Session, car: Car
) -> None:
    opened(session, car)
    key = session.scalars(select(Performance.concurrency_key)).one()
    with db.session() as batch:
        (lane,) = performance.lock_all(batch, {key, "no such lane"}).values()
        assert sa_inspect(lane).persistent and not batch.dirty
        assert columns(lane) == columns(session.get(Performance, lane.id))
        batch.commit()
        held = batch.get(Performance, lane.id)  # loaded again, unlocked
        assert held is lane and held.action_id is not None
        with db.transaction() as own:  # the lane moves on meanwhile
            own.execute(update(Performance).values(action_id=held.action_id + 100))

        assert performance.lock_all(batch, {key}) == {key: held}  # the same object,
        assert held.action_id == lane.action_id == session.get(Performance, held.id).action_id  # as stored


def test_a_lane_locked_alone_is_loaded_as_a_query_would(session: Session, car: Car) -> None:
    opened(session, car)
    key = session.scalars(select(Performance.concurrency_key)).one()
    with db.session() as batch:
        assert performance.lock(batch, "no such lane") is None
        lane = performance.lock(batch, key)
        assert lane is not None and sa_inspect(lane).persistent and not batch.dirty
        assert columns(lane) == columns(session.get(Performance, lane.id))
        moved = lane.action_id + 100
        batch.commit()  # the lock released
        batch.get(Performance, lane.id)  # loaded again, unlocked
        with db.transaction() as own:  # it moves on
            own.execute(update(Performance).values(action_id=moved))
        assert performance.lock(batch, key) is lane  # the same object, as stored
        assert lane.action_id == moved


@pytest.mark.postgresql_only
def test_the_actors_an_admission_reads_are_loaded_as_a_query_would(
    session: Session, car: Car, statements: list[str]
) -> None:
    other = Car(mileage=7, location="port")
    account = Account(name="held")
    fleet = Fleet(id=1, vans=[Van(id=1)])
    session.add_all([other, account, fleet])
    session.commit()
    references = [(registry.type_name(cls), str(actor.id)) for cls, actor in [(Car, car), (Car, other)]]
    references += [(registry.type_name(Account), str(account.id)), (registry.type_name(Fleet), "1")]
    with db.session() as batch:
        held = batch.get(Account, account.id)  # a row the session holds is kept as it is
        statements.clear()
        found = registry.load_actors(batch, references)

        # Then the cars were read through psycopg, as one array of keys, the rest by the ORM
        assert [sql for sql in statements if "FROM cars" in sql and "= ANY" in sql]
        assert held in found and len(found) == 4
        read_other = next(actor for actor in found if isinstance(actor, Car) and actor.id == other.id)
        assert columns(read_other) == columns(session.get(Car, other.id))
        read_fleet = next(actor for actor in found if isinstance(actor, Fleet))
        assert [van.id for van in read_fleet.vans] == [1]
        assert not batch.dirty and all(sa_inspect(actor).persistent for actor in found)


@pytest.mark.postgresql_only
def test_the_invocations_and_steps_a_batch_locks_come_with_their_actions_as_a_query_would(
    session: Session, car: Car
) -> None:
    # Given a trip whose body started two children, not yet admitted, and a root to admit
    engine.later(car, "trip")
    session.commit()
    testing.perform_enqueued()  # the trip admitted and its body run: two children invoked
    engine.later(car, "read")
    session.commit()
    ids = sorted(session.scalars(select(Invocation.id).where(Invocation.settled_at.is_(None))))
    trip_step = session.scalars(select(Step).where(Step.performed_at.is_not(None))).one()

    with db.session() as batch:
        # When a batch locks them
        (first, parent), (second, same_parent), (root, none) = batch_admission.lock_all(batch, ids)

        # Then each comes with its parent step's action, one object for both, and a root with none
        assert [first.id, second.id, root.id] == ids and none is None
        assert parent is same_parent and parent.id == trip_step.action_id
        assert columns(first) == columns(session.get(Invocation, first.id))
        assert columns(parent) == columns(session.get(Action, parent.id))
        assert not batch.dirty and sa_inspect(first).persistent

        # and the steps a batch concludes come with their actions, locked in id order
        ((step, action),) = lease.lock_all(batch, [trip_step.id])
        assert step.id == trip_step.id and action is parent
        assert columns(step) == columns(session.get(Step, trip_step.id))


@pytest.mark.postgresql_only
def test_a_step_the_session_holds_is_refreshed_in_place_by_a_statement_that_writes(
    session: Session, car: Car, statements: list[str]
) -> None:
    # Given a trip whose body started two children, both admitted and performing
    children, trip_step = trip_started(session, car)
    with db.transaction() as own:
        batch_admission.admit_all(own, [Unit(None, batch_admission.admit_all, tuple(children))])
    first, second = session.scalars(select(Invocation.action_id).where(Invocation.id.in_(children)))

    with db.session() as batch:
        held = batch.get(Step, trip_step.id)  # the session holds the waiting step
        assert held is not None and held.pending_actions_count == 2
        statements.clear()

        # When the first child's waiters are concluded
        ((step, waited_for),) = concluding.conclude_waiters_of(batch, [first], True, clock.now())

        # Then the statement ran once, and the step held is the one returned, as it left it
        assert sum("UPDATE stepwise_invocations" in sql for sql in statements) == 1
        assert step is held and waited_for == first
        assert step.pending_actions_count == 1 and not batch.dirty
        batch.commit()

    with db.session() as batch:
        # and in a session that holds nothing, the second's returns the step as stored
        ((step, waited_for),) = concluding.conclude_waiters_of(batch, [second], True, clock.now())
        assert step.pending_actions_count == 0 and sa_inspect(step).persistent and not batch.dirty
        batch.commit()
        session.expire_all()
        assert columns(step) == columns(session.get(Step, trip_step.id))


@pytest.mark.postgresql_only
def test_a_locking_read_of_rows_the_session_holds_sends_its_statement_once(
    session: Session, car: Car, statements: list[str]
) -> None:
    # Given a trip whose body started two children, and a batch that holds the trip's
    # action (the parent whose conclusion admits them), its step and its lane
    children, trip_step = trip_started(session, car)
    key = session.scalars(select(Performance.concurrency_key)).one()
    with db.session() as batch:
        held_action = batch.get(Action, trip_step.action_id)
        held_step = batch.get(Step, trip_step.id)
        (held_lane,) = performance.lock_all(batch, {key}).values()
        assert held_action is not None and held_step is not None
        with db.transaction() as own:  # the rows change meanwhile
            own.execute(update(Action).where(Action.id == held_action.id).values(resend_count=7))
            own.execute(update(Step).where(Step.id == held_step.id).values(attempt=5))
        statements.clear()

        # When it locks the children with their parent, the step, and the lane
        (_, parent), (_, same_parent) = batch_admission.lock_all(batch, children)
        ((step, action),) = lease.lock_all(batch, [trip_step.id])
        assert performance.lock_all(batch, {key}) == {key: held_lane}

        # Then each statement was sent once, and the objects held are refreshed in place
        assert len(statements) == 3, statements
        assert parent is same_parent is action is held_action and held_action.resend_count == 7
        assert step is held_step and held_step.attempt == 5
        assert not batch.dirty


class Ledger(engine.Actor, AppBase):
    """An actor with a column computed by an expression."""

    __tablename__ = "ledgers"

    id: Mapped[int] = mapped_column(primary_key=True)
    cents: Mapped[int] = mapped_column(default=0)
    euros = column_property(cents / 100)


def test_a_reader_refuses_a_class_whose_loading_does_more(database: Any) -> None:
    assert rows.plain(Car)
    assert not any(rows.plain(cls) for cls in (Logbook, Fleet, Ledger))
    with pytest.raises(ValueError, match="does more than set its columns"):
        rows.Reader(select(*rows.columns(Logbook)), database.dialect, [Logbook])


def test_actions_read_by_id_are_loaded_as_a_query_would(
    session: Session, car: Car, statements: list[str]
) -> None:
    opened(session, car)
    ids = session.scalars(select(Action.id)).all()
    with db.session() as batch:
        statements.clear()
        (action,) = rows.by_ids(batch, Action, [*ids, 999_999])
        if batch.get_bind().dialect.name == "postgresql":
            (sent,) = statements
            assert "= ANY (%(ids)s" in sent  # psycopg's own statement
        assert sa_inspect(action).persistent and not batch.dirty
        assert columns(action) == columns(session.get(Action, action.id))
        with db.transaction() as own:  # the action changes meanwhile
            own.execute(update(Action).values(name="renamed"))
        assert rows.by_ids(batch, Action, ids) == [action]  # the session's own object,
        assert action.name == "read"  # unchanged unless refreshed
        assert rows.by_ids(batch, Action, ids, refresh=True) == [action]
        assert action.name == "renamed" and not batch.dirty
