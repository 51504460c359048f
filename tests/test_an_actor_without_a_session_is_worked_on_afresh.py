"""Given an actor row whose session is closed (a detached copy), when an action is
performed on it with ``now()``, then the engine works on a fresh copy of the row in a
session of its own, as a worker would after ``later()``: the changes reach the database,
and the detached copy is left as it was.

Issue 9: the steps ran against the detached object, so their changes never reached the
database, yet the action reported succeeded.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from tests.domain import Car


def stored_car() -> Car:
    with engine.new_session() as fresh:
        found = fresh.scalars(select(Car)).one()
        fresh.expunge(found)
        return found


def test_now_on_an_actor_whose_session_is_closed_changes_the_stored_row(session: Session, car: Car) -> None:
    # Given an action whose before hook and step both change the car
    tune = engine.define(Car, "tune")

    @tune.before
    def count(car: Car, action: engine.Action, miles: int) -> None:
        car.befores += 1

    @tune.step
    def test_drive(car: Car, step: engine.StepContext, miles: int) -> None:
        car.drive(miles)

    # And a car whose session is closed
    session.close()

    # When the action is performed now on the detached car
    action = engine.now(car, "tune", 5)

    # Then it succeeded, and its changes are in the database
    assert action.status == "succeeded"
    stored = stored_car()
    assert (stored.befores, stored.mileage) == (1, 5)

    # And the detached copy was not the one changed
    assert (car.befores, car.mileage) == (0, 0)


def test_completing_an_outbound_action_on_a_detached_actor_runs_its_callbacks_on_the_stored_row(
    session: Session, car: Car
) -> None:
    # Given an outbound action whose after-callback changes the car, performing
    paint = engine.define(Car, "paint", lambda car: None, outbound=True)

    @paint.succeeded
    def honk_when_done(car: Car, action: engine.Action) -> None:
        car.honk()

    assert engine.now(car, "paint").status == "performing"

    # When it is completed by actor and name, the car's session closed
    session.close()
    completion = engine.complete(car, "paint")

    # Then the callback changed the stored row
    assert completion
    assert stored_car().honks == 1
