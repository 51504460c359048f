"""What the tests of a batch of conclusions (engine/batch_conclusion.py) share: the
actions they conclude, their admission in one batch, their bodies run, and the statements
a block sends."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import batch_admission, db, step_body, testing
from engine.conclusion import Outcome
from engine.group_commit import Unit
from engine.models import Action, Invocation, Step
from engine.step_context import StepContext
from tests.domain import Car


def returns_the_bay(car: Car, bay: int) -> dict[str, int]:
    return {"bay": bay}


def declare() -> None:
    engine.define(Car, "wash", returns_the_bay, concurrency_key=lambda car, bay: f"{car.id}/bay/{bay}")
    engine.define(Car, "breakdown", Car.breakdown)
    trip = engine.define(Car, "trip")

    @trip.step
    def go(car: Car, step: StepContext) -> None:
        step.do("wash", 1)
        step.do("wash", 2)

    @trip.step
    def back(car: Car, step: StepContext) -> str:
        return "home"

    convoy = engine.define(Car, "convoy")

    @convoy.step
    def set_off(car: Car, step: StepContext) -> str:
        step.do("wash", 6)
        step.do("wash", 7)
        return "convoy"

    errand = engine.define(Car, "errand")

    @errand.step
    def only(car: Car, step: StepContext) -> str:
        step.do("wash", 5)
        return "errand done"

    tour = engine.define(Car, "tour")

    @tour.step
    def first(car: Car, step: StepContext) -> int:
        return 1

    @tour.step
    def second(car: Car, step: StepContext) -> int:
        return 2


def admit(invocation_ids: list[int]) -> None:
    with db.transaction() as session:
        batch_admission.admit_all(session, [Unit(None, batch_admission.admit_all, tuple(invocation_ids))])


def open_steps(session: Session, car: Car) -> list[int]:
    """The steps of ``car``'s actions whose bodies have not run, in id order."""
    session.expire_all()
    return list(
        session.scalars(
            select(Step.id)
            .join(Action, Action.id == Step.action_id)
            .where(Action.actor_id == str(car.id), Step.performed_at.is_(None), Step.completed_at.is_(None))
            .order_by(Step.id)
        )
    )


def run_body(step_id: int) -> Outcome:
    """Run a step's body in a session of its own and roll back, as a worker does before it
    hands the outcome to its batch."""
    with db.session() as session, testing.handle_exceptions():
        outcome = step_body.perform(session, step_id)
        session.rollback()
    assert outcome is not None
    return outcome


def bodies_of(session: Session, name: str, count: int) -> tuple[list[Car], list[tuple[int, Outcome]]]:
    """``count`` cars, each with ``name`` admitted and its first body run: the cars, and
    each body's step and outcome."""
    cars = [Car(id=n) for n in range(1, count + 1)]
    session.add_all(cars)
    session.commit()
    for car in cars:
        engine.later(car, name)
    session.commit()
    admit(list(session.scalars(select(Invocation.id))))
    return cars, [(step_id, run_body(step_id)) for car in cars for step_id in open_steps(session, car)]


def step_of(session: Session, step_id: int) -> tuple[str, Any]:
    step = session.get(Step, step_id)
    action = session.get(Action, step.action_id)  # type: ignore[union-attr]
    return action.name, action.arguments_json  # type: ignore[union-attr]
