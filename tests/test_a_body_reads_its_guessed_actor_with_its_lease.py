"""A worker guesses whose step it runs next (the actor of the body before it: children and
next steps are mostly on the same actor) and reads that actor's row in the statement that
takes the step's lease (engine/lease.py): a body on a guessed actor starts without a query
of its own. A wrong guess, or a malformed one in a message, only costs the usual read: the
body always gets its own actor, as the database holds it now."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event, select, update
from sqlalchemy.orm import Session

import engine
from engine import batch_admission, broker, db, jobs, registry, status, testing
from engine.group_commit import Unit
from engine.models import Action, Invocation, Step
from engine.step_context import StepContext
from tests.domain import Car, Fleet, Van


def odometer(car: Car, gauge: int) -> int:
    return car.mileage


@pytest.fixture(autouse=True)
def declare() -> None:
    engine.define(Car, "odometer", odometer, concurrency_key=lambda car, gauge: f"{car.id}/gauge/{gauge}")
    trip = engine.define(Car, "trip")

    @trip.step
    def go(car: Car, step: StepContext) -> None:
        step.do("odometer", 1)  # two lanes: both can run at once
        step.do("odometer", 2)


@pytest.fixture
def admitting_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine.config, "admit_children_here", True)  # as in a worker


def opened(session: Session, car: Car, *invoked: Any) -> int:
    """The step of a new action on ``car`` (by default an odometer), opened and not run."""
    engine.later(car, *(invoked or ("odometer", 1)))
    session.commit()
    invocation = session.scalars(select(Invocation.id).where(Invocation.settled_at.is_(None))).one()
    with db.transaction() as own:
        batch_admission.admit_all(own, [Unit(None, batch_admission.admit_all, (invocation,))])
    return session.scalars(
        select(Step.id).join(Action).where(Action.actor_id == str(car.id), Step.performed_at.is_(None))
    ).one()


@pytest.fixture
def reads_of_cars(database: Any) -> Iterator[list[str]]:
    """The statements that read the cars table: alone, or joined to a lease."""
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "FROM cars" in statement or "JOIN cars" in statement:
            seen.append("with the lease" if "stepwise_steps" in statement else "alone")

    event.listen(database, "before_cursor_execute", record)
    yield seen
    event.remove(database, "before_cursor_execute", record)


def result_of(session: Session, step_id: int) -> Any:
    session.expire_all()
    step = session.get(Step, step_id)
    assert step is not None and step.status == status.STEP_SUCCEEDED
    return step.result


def moved(session: Session, car: Car, mileage: int) -> None:
    """The car changes in the database behind the session's back."""
    with db.transaction() as own:
        own.execute(update(Car).where(Car.id == car.id).values(mileage=mileage))


def test_a_right_guess_reads_the_actor_with_the_lease(
    session: Session, car: Car, reads_of_cars: list[str]
) -> None:
    step_id = opened(session, car)
    moved(session, car, 42)
    reads_of_cars.clear()

    jobs.perform_step(step_id, [registry.type_name(Car), str(car.id)])

    assert reads_of_cars == ["with the lease"]
    assert result_of(session, step_id) == 42  # the row as the database holds it now


@pytest.mark.parametrize(
    "guess",
    [
        pytest.param(lambda other: [registry.type_name(Car), str(other.id)], id="another car"),
        pytest.param(lambda other: ["Boat", "1"], id="a class this process does not know"),
        pytest.param(lambda other: [registry.type_name(Car), "abc"], id="an id that is not a key"),
        pytest.param(lambda other: ["Car"], id="malformed"),
        pytest.param(lambda other: 7, id="not a reference"),
    ],
)
def test_a_wrong_guess_reads_the_actor_as_usual(
    session: Session, car: Car, reads_of_cars: list[str], guess: Any
) -> None:
    other = Car(mileage=7)
    session.add(other)
    session.commit()
    step_id = opened(session, car)
    moved(session, car, 42)
    reads_of_cars.clear()

    jobs.perform_step(step_id, guess(other))

    assert reads_of_cars[-1] == "alone"
    assert result_of(session, step_id) == 42


def test_children_sent_to_the_workers_carry_their_parents_actor(
    session: Session, car: Car, admitting_here: None, reads_of_cars: list[str]
) -> None:
    # Given a trip whose body starts two children: the first runs here, the second is sent
    step_id = opened(session, car, "trip")
    jobs.perform_step(step_id)

    # Then the message of the second names the trip's actor
    sent = testing.enqueued(broker.PERFORM_STEP)
    assert [item.args[1:] for item in sent] == [([registry.type_name(Car), str(car.id)],)]
    # and every body after the trip's own read its car with its lease: the first child in
    # this thread, the second from its message
    reads_of_cars.clear()
    testing.drain()
    assert reads_of_cars == ["with the lease"]
    session.expire_all()
    trip = session.scalars(select(Action).where(Action.name == "trip")).one()
    assert trip.status == status.SUCCEEDED


def count_vans(fleet: Fleet, step: StepContext) -> int:
    return len(fleet.vans)


def test_an_actor_whose_class_joins_a_collection_is_admitted_and_read_with_the_lease(
    session: Session,
) -> None:
    # Given a fleet of two vans, its class loading them with a join, and two steps on it
    fleet = Fleet(id=1, vans=[Van(id=1), Van(id=2)])
    session.add(fleet)
    session.commit()
    counting = engine.define(Fleet, "count")
    counting.step(count_vans)
    counting.step(count_vans)
    engine.later(fleet, "count")
    session.commit()

    # When the worker admits it and runs both bodies, each guessing the fleet
    testing.drain()

    # Then both saw the fleet with its vans
    session.expire_all()
    action = session.scalars(select(Action).where(Action.name == "count")).one()
    assert (action.status, action.result) == (status.SUCCEEDED, 2)
