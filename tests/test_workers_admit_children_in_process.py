"""Given a worker with in-process admission on (the default outside ``engine.testing``),
when a step body starts children, then the worker admits them itself, in the transaction
that concludes the body (or, if that fails, in one transition once it committed), runs the
first child's body at once and sends the others' bodies to the workers: the tree ends as
it does through the broker, with fewer messages and transactions. The invocation rows stay
the outbox: a child whose worker died before admitting it is sent again by the sweeper."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

import engine
from engine import batch_admission, config, db, sweeper, testing
from engine.group_commit import Unit
from engine.models import Action, Invocation
from tests.domain import Car


@pytest.fixture(autouse=True)
def in_process_admission() -> Iterator[None]:
    config.admit_children_here = True
    yield
    config.admit_children_here = False


@pytest.fixture(autouse=True)
def trip() -> None:
    """Four drives, each in a lane of its own: three in parallel, then one more."""
    engine.define(Car, "drive", concurrency_key=lambda car, miles: f"Car/{car.id}/drive/{miles}")
    trip = engine.define(Car, "trip")

    @trip.step
    def errands(car: Car, step: engine.StepContext) -> None:
        for miles in (1, 2, 3):
            step.do("drive", miles)

    @trip.step
    def home(car: Car, step: engine.StepContext) -> None:
        step.do("drive", 4)


def messages_while_draining() -> list[str]:
    jobs: list[str] = []
    while due := [item for item in testing.enqueued() if item.due is None or item.due <= engine.clock.now()]:
        jobs += [item.job for item in due]
        testing.perform_enqueued()
    return jobs


def test_a_tree_ends_as_through_the_broker_with_fewer_messages(session: Session, car: Car) -> None:
    engine.later(car, "trip")
    session.commit()
    jobs = messages_while_draining()

    session.expire_all()
    statuses = session.execute(select(Action.name, Action.status).order_by(Action.id)).all()
    assert [tuple(row) for row in statuses] == [("trip", "succeeded")] + [("drive", "succeeded")] * 4
    assert session.get_one(Car, car.id).mileage == 10
    # The root's admission, then two sibling bodies sent to the workers; the first child
    # and the second step's child ran in the process that made them ready.
    assert sorted(jobs) == ["stepwise.admit", "stepwise.perform_step", "stepwise.perform_step"]


@contextmanager
def admitting_with_the_parent_fails() -> Iterator[list[int]]:
    """Admitting children in the batch that concludes their parent's body fails (an error
    of the database, say): the batch's SAVEPOINT undoes it. Yields the invocations it
    failed to admit."""
    failed: list[int] = []
    original = batch_admission._admit

    def failing(session: Session, owners: dict[int, Any]) -> Any:
        if session.in_nested_transaction():
            failed.extend(owners)
            raise RuntimeError("admitting with the parent failed")
        return original(session, owners)

    batch_admission._admit = failing  # type: ignore[assignment]
    try:
        yield failed
    finally:
        batch_admission._admit = original  # type: ignore[assignment]


def test_a_body_s_children_are_admitted_in_the_transaction_that_concludes_it(
    session: Session, car: Car
) -> None:
    engine.later(car, "trip")
    session.commit()
    commits: list[object] = []

    def count(connection: object) -> None:
        commits.append(connection)

    bind = session.get_bind()
    event.listen(bind, "commit", count)
    try:
        testing.perform_enqueued()  # the root's admission message
    finally:
        event.remove(bind, "commit", count)
    # The root admitted (its first step claimed); its body concluded with its three
    # children admitted (the first child's step claimed); the first child concluded. The
    # two other children's bodies went to the workers.
    assert len(commits) == 3
    assert [item.job for item in testing.enqueued()] == ["stepwise.perform_step"] * 2
    unsettled = session.scalars(select(Invocation).where(Invocation.settled_at.is_(None))).all()
    assert unsettled == []


def test_children_whose_admission_failed_with_their_parent_are_admitted_after_it(
    session: Session, car: Car
) -> None:
    engine.later(car, "trip")
    session.commit()
    with admitting_with_the_parent_fails() as failed:
        testing.perform_enqueued()
    assert len(failed) == 3
    # The root's first body concluded all the same; its children were admitted once that
    # committed, by the same worker, as before.
    session.expire_all()
    settled = session.scalars(select(Invocation.outcome).where(Invocation.id.in_(failed))).all()
    assert settled == ["admitted"] * 3
    testing.drain()
    session.expire_all()
    assert session.get_one(Car, car.id).mileage == 10
    statuses = session.scalars(select(Action.status)).all()
    assert statuses == ["succeeded"] * 5


def test_a_child_never_admitted_in_process_is_sent_again_by_the_sweeper(session: Session, car: Car) -> None:
    engine.later(car, "trip")
    session.commit()
    # The worker admits the root and runs its first body; admitting the children it
    # started with that body's conclusion fails, and the worker dies before admitting them
    # after: their rows are all that is left.
    root_admission = testing.enqueued("stepwise.admit")
    assert len(root_admission) == 1
    from engine import running

    original = running._admit_here
    running._admit_here = lambda ids: ([], {})  # type: ignore[assignment]
    try:
        with admitting_with_the_parent_fails():
            testing.perform_enqueued()
    finally:
        running._admit_here = original
    unsettled = session.scalars(select(Invocation).where(Invocation.settled_at.is_(None))).all()
    assert len(unsettled) == 3

    testing.travel(timedelta(minutes=1))  # past the sweeper's grace (engine.testing resets the clock)
    with engine.new_session() as sweeping:
        report = sweeper.sweep(sweeping)
    assert report.admit == 3
    testing.drain()
    session.expire_all()
    assert session.get_one(Car, car.id).mileage == 10


def test_siblings_on_one_actor_admitted_together_read_the_actor_once(session: Session, car: Car) -> None:
    # Given the trip's first step, which starts three drives on the same car
    engine.later(car, "trip")
    session.commit()
    reads: list[str] = []

    def count(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        reads_cars = "FROM cars" in statement or "JOIN cars" in statement
        if statement.lstrip().upper().startswith("SELECT") and reads_cars:
            reads.append(statement)

    # When the worker admits the root, runs its first body and admits the three children
    bind = session.get_bind()
    event.listen(bind, "before_cursor_execute", count)
    try:
        testing.perform_enqueued()  # the root's admission message
    finally:
        event.remove(bind, "before_cursor_execute", count)

    # Then the car was read once to admit the root and once for the three admissions
    # together: the batch that admits an action claims its first step for the worker's
    # thread, and hands the body the actor it read to admit it, in that same transaction
    # (engine/claiming.py)
    assert len(reads) == 2
    assert ["JOIN cars" in statement for statement in reads] == [False, False]
    testing.drain()
    session.expire_all()
    assert session.get_one(Car, car.id).mileage == 10


def test_an_error_of_the_batch_s_own_writes_is_not_taken_for_the_childrens(
    session: Session, car: Car
) -> None:
    # Given a batch whose transitions made children due and left a write for the database
    # to refuse when it is flushed (a deadlock or a lost connection would do the same)
    engine.later(car, "trip")
    session.commit()
    invocation_id = session.scalars(select(Invocation.id)).one()
    unit: Unit[Any] = Unit(None, admit_due=True)
    assert unit.due is not None
    unit.due.append(invocation_id)
    with db.transaction() as batch:
        batch.add(Invocation(kind="action"))  # no actor: NOT NULL refuses it
        # When the batch admits what its transitions made due
        # Then the error is the batch's (retried or failed as any), not swallowed as a
        # failed admission
        with pytest.raises(IntegrityError):
            batch_admission.admit_due(batch, [unit])
        batch.rollback()
    assert unit.admissions == [] and unit.sends == []
