"""Timeouts fail the tree above: an action still performing when its timeout has passed
is completed as timed_out, and its parent step and parent action fail with it.

Spec §8 cases 73-74 (test/models/stepped/action_timeout_test.rb). Stepped's ``travel_to``
is ``testing.freeze``/``testing.travel``; its TimeoutJob is our ``stepwise.timeout`` message.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import testing
from tests.conftest import Counts
from tests.domain import Car

T = datetime(2025, 1, 2, 3, 4, 5)


def declare_visit() -> None:
    """``visit`` changes location in a child action; ``change_location`` is outbound with a
    5-second timeout. Neither may succeed: their succeeded callbacks raise."""
    visit = engine.define(Car, "visit")

    @visit.step
    def go(car: Car, step: engine.StepContext, location: str) -> None:
        step.do("change_location", location)

    @visit.succeeded
    def never_visit(car: Car, action: engine.Action, location: str) -> None:
        raise RuntimeError("visit must not succeed")

    change_location = engine.define(Car, "change_location", outbound=True, timeout=timedelta(seconds=5))

    @change_location.succeeded
    def never_change(car: Car, action: engine.Action, location: str) -> None:
        raise RuntimeError("change_location must not succeed")


def is_timeout(queued: testing.Enqueued) -> bool:
    return queued.job == "stepwise.timeout"


def is_admission(queued: testing.Enqueued) -> bool:
    return queued.job == "stepwise.admit"


def test_an_action_times_out_if_not_completed_in_time(session: Session, car: Car, counts: Counts) -> None:
    """Spec §8 case 73: action times out if not completed within the specified time."""
    # Given change_location is outbound with a 5-second timeout
    declare_visit()
    testing.freeze(T)

    # When it is performed
    action = engine.now(car, "change_location", "Copenhagen")

    # Then it performs, waiting to be completed, with its timeout scheduled
    delta = counts.delta()
    assert (delta["actions"], delta["performances"]) == (1, 1)
    assert len(testing.enqueued("stepwise.timeout")) == 1
    session.refresh(action)
    assert action.status == "performing"
    assert action.timeout is not None
    assert action.timeout == timedelta(seconds=5)
    assert action.timeout_seconds == 5
    assert action.started_at == T
    session.refresh(car)
    assert car.location == "Copenhagen"

    # When 6 seconds later the timeout is performed
    testing.travel(timedelta(seconds=6))
    assert testing.perform_enqueued(only=is_timeout) == 1

    # Then the action timed out and left its lane
    assert counts.delta()["performances"] == -1
    session.refresh(action)
    assert action.status == "timed_out"
    assert action.completed_at == T + timedelta(seconds=6)


def test_a_nested_timeout_fails_the_parent_step_and_parent_action(
    session: Session, car: Car, counts: Counts
) -> None:
    """Spec §8 case 74: timeout of nested action fails the parent step and parent action."""
    # Given visit runs change_location, which times out after 5 seconds
    declare_visit()
    testing.freeze(T)

    # When visit is performed with its child
    parent = engine.now(car, "visit", "Copenhagen")
    assert testing.perform_enqueued(only=is_admission) == 1

    # Then both perform, and only the child has a timeout
    delta = counts.delta()
    assert (delta["actions"], delta["steps"], delta["performances"]) == (2, 2, 2)
    assert len(testing.enqueued("stepwise.timeout")) == 1
    session.refresh(parent)
    assert parent.status == "performing"
    assert parent.timeout is None
    assert parent.started_at == T
    nested = session.scalars(select(engine.Action).where(engine.Action.name == "change_location")).one()
    assert nested.status == "performing"
    assert nested.timeout == timedelta(seconds=5)
    assert nested.started_at == T
    session.refresh(car)
    assert car.location == "Copenhagen"

    # When 6 seconds later the timeout is performed
    testing.travel(timedelta(seconds=6))
    assert testing.perform_enqueued(only=is_timeout) == 1

    # Then the child timed out, which failed its parent at the same instant
    assert counts.delta()["performances"] == -2
    session.refresh(nested)
    session.refresh(parent)
    assert nested.status == "timed_out"
    assert nested.completed_at == T + timedelta(seconds=6)
    assert parent.status == "failed"
    assert parent.completed_at == T + timedelta(seconds=6)
    (step,) = parent.steps
    assert step.status == "failed"


@pytest.mark.parametrize("timeout", [timedelta(milliseconds=500), 0.5], ids=["timedelta", "seconds"])
def test_a_timeout_under_one_second_times_the_action_out(
    session: Session, car: Car, timeout: timedelta | float
) -> None:
    """Not a spec case (issue 9): a timeout keeps its fraction of a second. Truncated to
    whole seconds, half a second became 0, which means no timeout at all."""
    # Given change_location is outbound with a half-second timeout
    engine.define(Car, "change_location", outbound=True, timeout=timeout)
    testing.freeze(T)

    # When it is performed
    action = engine.now(car, "change_location", "Copenhagen")

    # Then its timeout is stored as half a second, and due half a second after it started
    session.refresh(action)
    assert action.timeout == timedelta(milliseconds=500)
    [queued] = testing.enqueued("stepwise.timeout")
    assert queued.due == T + timedelta(milliseconds=500)

    # When the timeout is performed early, it changes nothing
    testing.travel(timedelta(milliseconds=400))
    testing.drain(only=is_timeout)
    session.refresh(action)
    assert action.status == "performing"

    # When it is performed after the half second, the action timed out
    testing.travel(timedelta(milliseconds=200))
    assert testing.drain(only=is_timeout) == 1
    session.refresh(action)
    assert action.status == "timed_out"
    assert action.completed_at == T + timedelta(milliseconds=600)
