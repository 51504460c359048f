"""Given a car with a declared multi-step action, when it runs, the tree completes."""

from __future__ import annotations

from sqlalchemy.orm import Session

import engine
from engine import testing
from tests.conftest import Counts
from tests.domain import Car


def test_a_method_becomes_a_one_step_action_and_succeeds(session: Session, car: Car, counts: Counts) -> None:
    action = engine.now(car, "drive", 4)

    assert action.status == "succeeded"
    assert car.mileage == 4
    assert counts.delta() == {"actions": 1, "steps": 1, "performances": 0, "achievements": 0}


def test_a_multi_step_action_waits_for_its_children(session: Session, car: Car, counts: Counts) -> None:
    visit = engine.define(Car, "visit", checksum=lambda car, location: location)

    @visit.step
    def go(car: Car, step: engine.StepContext, location: str) -> None:
        step.do("honk")
        step.do("drive", 5)

    @visit.step
    def arrive(car: Car, step: engine.StepContext, location: str) -> None:
        car.location = location

    action = engine.now(car, "visit", "Paris")
    assert action.status == "performing"
    assert testing.drain() == 2
    session.refresh(car)
    session.refresh(action)
    assert (car.mileage, car.honks, car.location, action.status) == (5, 1, "Paris", "succeeded")
    assert counts.delta() == {"actions": 3, "steps": 4, "performances": 0, "achievements": 1}
