"""Given an outbound action that has run its steps, when something outside completes it
(a webhook, an operator, a job), then it leaves its lane with that status, runs the
after-callbacks for it, and the steps waiting on it go on.

Ported from Stepped's test/models/stepped/action_completes_outbound_test.rb (spec §8,
cases 47-51). ``Stepped::Performance.outbound_complete(car, :drive, status)`` is
``engine.complete(car, "drive", status)``, which returns a ``Completion`` (truthy when
it completed the action).
"""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import testing
from tests.conftest import Counts
from tests.domain import Car


def is_admission(item: testing.Enqueued) -> bool:
    """Stepped's ``only: Stepped::ActionJob``: admission messages only."""
    return item.job == "stepwise.admit"


@pytest.fixture(autouse=True)
def visit_and_drive() -> None:
    """``visit`` drives, then changes location; ``drive`` is outbound and drives one more
    mile when it ends cancelled, failed or timed out."""
    visit = engine.define(Car, "visit")

    @visit.step
    def drive_there(car: Car, step: engine.StepContext, distance: int, location: str) -> None:
        step.do("drive", distance)

    @visit.step
    def arrive(car: Car, step: engine.StepContext, distance: int, location: str) -> None:
        step.do("change_location", location)

    drive = engine.define(Car, "drive", outbound=True)

    @drive.after("cancelled", "failed", "timed_out")
    def drive_one_more_mile(car: Car, action: engine.Action, *args: object) -> None:
        car.drive(1)


def reload(session: Session) -> None:
    """See what the jobs committed: end the session's read transaction (on SQLite it reads
    from the snapshot taken at its first read), then reload every object on next access."""
    session.commit()
    session.expire_all()


def last_action(session: Session) -> engine.Action:
    found = session.scalars(select(engine.Action).order_by(engine.Action.id.desc()).limit(1)).first()
    assert found is not None
    return found


def test_a_direct_outbound_action_performs_until_completed_successfully_from_outside(
    session: Session, car: Car, counts: Counts
) -> None:
    """Spec §8 case 47: performing direct action that completes successfully outbound."""
    # When the outbound drive is performed directly
    action = engine.now(car, "drive", 11)

    # Then it ran its step and stays performing, holding its lane
    assert counts.delta() == {"actions": 1, "steps": 1, "performances": 1, "achievements": 0}
    assert action.status == "performing"
    assert action.outbound
    assert action.actor is car
    assert action.name == "drive"
    assert action.arguments == [11]
    assert action.started_at is not None
    assert action.completed_at is None
    assert action.current_step_index == 0
    session.refresh(car)
    assert car.mileage == 11

    # When it is completed from outside
    assert engine.complete(car, "drive")

    # Then it succeeded and its lane is gone; nothing else changed
    assert counts.delta() == {"actions": 0, "steps": 0, "performances": -1, "achievements": 0}
    session.refresh(action)
    assert action.status == "succeeded"
    assert action.completed_at is not None
    assert action.started_at < action.completed_at


@pytest.mark.parametrize("completed_as", ["cancelled", "failed", "timed_out"])
def test_completing_an_outbound_action_as_unsuccessful_runs_its_after_callback(
    session: Session, car: Car, counts: Counts, completed_as: str
) -> None:
    """Spec §8 cases 48-50: completing outbound action as cancelled / failed / timed_out
    with an after callback."""
    # Given the outbound drive is performing
    action = engine.now(car, "drive", 11)
    session.refresh(car)
    assert car.mileage == 11
    counts.delta()

    # When it is completed from outside with an unsuccessful status
    assert engine.complete(car, "drive", completed_as)

    # Then it ends with that status, leaves its lane, and its callback drove one more mile
    assert counts.delta() == {"actions": 0, "steps": 0, "performances": -1, "achievements": 0}
    session.refresh(action)
    assert action.status == completed_as
    assert action.completed_at is not None
    assert action.started_at is not None
    assert action.started_at < action.completed_at
    session.refresh(car)
    assert car.mileage == 12


def test_a_nested_outbound_action_completed_from_outside_lets_its_parent_go_on(
    session: Session, car: Car, counts: Counts
) -> None:
    """Spec §8 case 51: performing action that completes outbound as nested action."""
    # Given a visit whose first step started the outbound drive
    action = engine.now(car, "visit", 100, "London")
    assert testing.drain(is_admission) == 1
    reload(session)
    assert action.status == "performing"
    assert not action.outbound
    assert action.steps
    for step in action.steps:
        assert step.status == "performing"
    nested = last_action(session)
    assert nested.name == "drive"
    assert nested.status == "performing"
    assert nested.outbound
    assert car.mileage == 100
    assert car.location is None
    counts.delta()

    # When the drive is completed from outside
    assert engine.complete(car, "drive")

    # Then the drive succeeded and the visit's second step started at once
    assert counts.delta() == {"actions": 0, "steps": 1, "performances": -1, "achievements": 0}
    session.refresh(nested)
    assert nested.status == "succeeded"

    # And when the second step's child runs, the visit succeeds in London
    assert testing.drain(is_admission) == 1
    reload(session)
    assert action.status == "succeeded"
    assert car.location == "London"
