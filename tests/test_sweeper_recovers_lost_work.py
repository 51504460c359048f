"""Given work whose message was lost, or whose worker died, when the sweeper runs after the
grace period, then it sends that work again once, records one ``recovered`` event caused by
the sweeper, and the tree completes: admissions, children, waits, timeouts, steps and
retries. What the sweeper leaves alone is in test_sweeper_leaves_recent_and_live_work_alone.py.

Not a spec case: Stepped has no crash recovery (DESIGN invariant 4; issue 3, "Nothing is
lost"). How work is lost is in sweeper_scenarios.py.
"""

from __future__ import annotations

from datetime import timedelta

import dramatiq
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import StepContext, status, testing
from engine.models import Action, Invocation, Step
from engine.retry import RetryPolicy
from engine.sweeper import GRACE, SweepReport
from tests.domain import Car
from tests.sweeper_scenarios import (
    SECOND,
    T,
    define_outbound_move,
    define_park,
    frozen,
    lose_messages,
    open_without_running,
    recovered,
    reloaded,
    sweep,
)

__all__ = ["frozen"]  # the autouse fixture: pytest finds it in this module


# --- admission ----------------------------------------------------------------------------


def test_an_invocation_whose_admission_message_was_lost_is_performed_after_the_grace_period(
    session: Session, car: Car
) -> None:
    # Given an invocation committed, whose message the broker lost
    invocation = engine.later(car, "drive", 5)
    session.commit()
    lose_messages()

    # When the sweeper runs after the grace period
    testing.travel(GRACE + SECOND)
    report = sweep()

    # Then it sent the admission again, once, and the action is performed
    assert report == SweepReport(admit=1)
    assert [m.args for m in testing.enqueued("stepwise.admit")] == [(invocation.id,)]
    assert testing.drain() == 1
    session.refresh(car)
    assert car.mileage == 5
    action = session.scalars(select(Action)).one()
    assert action.status == status.SUCCEEDED

    # and the history holds one recovery, by the sweeper, naming the job and the invocation
    [event] = recovered(session)
    assert (event.cause, event.invocation_id, event.data["job"]) == (
        "sweeper",
        invocation.id,
        "stepwise.admit",
    )

    # and a second sweep finds nothing left to do
    testing.travel(GRACE + SECOND)
    assert sweep() == SweepReport()
    assert testing.enqueued() == []


def test_an_invocation_committed_while_the_broker_was_down_is_performed(
    session: Session, car: Car, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``later()`` commits even when the broker refuses its message after the commit."""

    # Given a broker that is down when the invocation commits
    def down(*args: object, **kwargs: object) -> None:
        raise ConnectionError("broker down")

    monkeypatch.setattr(dramatiq.get_broker(), "enqueue", down)
    engine.later(car, "drive", 7)
    session.commit()
    monkeypatch.undo()
    assert testing.enqueued() == []

    # When the broker is back and the sweeper runs after the grace period
    testing.travel(GRACE + SECOND)
    assert sweep() == SweepReport(admit=1)
    testing.drain()

    # Then the action was performed
    session.refresh(car)
    assert car.mileage == 7
    assert len(recovered(session)) == 1


def test_a_child_whose_admission_message_was_lost_is_performed_and_its_parent_goes_on(
    session: Session, car: Car
) -> None:
    # Given a parent whose step started a child, whose admission message was lost
    visit = engine.define(Car, "visit")

    @visit.step
    def go(car: Car, step: StepContext) -> None:
        step.do("drive", 3)

    parent = engine.now(car, "visit")
    lose_messages()
    assert parent.status == status.PERFORMING

    # When the sweeper runs after the grace period
    testing.travel(GRACE + SECOND)
    assert sweep() == SweepReport(admit=1)
    testing.drain()

    # Then the child was performed and the parent succeeded
    session.refresh(car)
    assert car.mileage == 3
    assert reloaded(session, parent).status == status.SUCCEEDED

    # and the recovery is in the parent's history
    [event] = recovered(session)
    assert (event.action_id, event.cause, event.data["job"]) == (parent.id, "sweeper", "stepwise.admit")


# --- waits, timeouts and steps ------------------------------------------------------------


def test_a_wait_whose_message_was_lost_concludes_after_its_due_time_and_the_grace_period(
    session: Session, car: Car
) -> None:
    # Given a step waiting 60 seconds, whose wait_over message was lost
    define_park(60)
    action = engine.now(car, "park")
    lose_messages()
    [wait] = session.scalars(select(Invocation).where(Invocation.kind == "wait")).all()

    # When the sweeper runs after the wait is due, within the grace period
    testing.travel(timedelta(seconds=60) + GRACE - SECOND)
    assert sweep() == SweepReport()

    # Then nothing is sent; after the grace period the wait is sent again
    testing.travel(2 * SECOND)
    assert sweep() == SweepReport(wait_over=1)
    assert [m.args for m in testing.enqueued("stepwise.wait_over")] == [(wait.id,)]
    testing.drain()

    # and the step concluded, and the action's next step ran
    assert reloaded(session, action).status == status.SUCCEEDED
    session.refresh(car)
    assert car.location == "garage"
    [event] = recovered(session)
    assert (event.action_id, event.step_id, event.invocation_id) == (action.id, wait.parent_step_id, wait.id)
    assert (event.cause, event.data["job"]) == ("sweeper", "stepwise.wait_over")


def test_an_action_whose_timeout_message_was_lost_times_out_after_the_grace_period(
    session: Session, car: Car
) -> None:
    # Given an outbound action with a 5 second timeout, whose timeout message was lost
    define_outbound_move()
    action = engine.now(car, "change_location", "Paris")
    assert action.status == status.PERFORMING
    lose_messages()

    # When the sweeper runs within the grace period after the deadline, then after it
    testing.travel(timedelta(seconds=5) + GRACE - SECOND)
    assert sweep() == SweepReport()
    testing.travel(2 * SECOND)
    assert sweep() == SweepReport(timeout=1)
    testing.drain()

    # Then the action timed out
    assert reloaded(session, action).status == status.TIMED_OUT
    [event] = recovered(session)
    assert (event.action_id, event.cause, event.data["job"]) == (action.id, "sweeper", "stepwise.timeout")
    assert event.data["deadline_at"] == (T + timedelta(seconds=5)).isoformat()


def test_a_step_whose_worker_died_before_its_body_ran_is_run_again(session: Session, car: Car) -> None:
    # Given a step opened by a worker that was killed before the step's body committed
    invocation = open_without_running(session, car, "drive", 4)
    step = session.scalars(select(Step)).one()
    assert (step.status, step.performed_at) == (status.STEP_PERFORMING, None)

    # When the sweeper runs within the grace period, then after it
    testing.travel(GRACE - SECOND)
    assert sweep() == SweepReport()
    testing.travel(2 * SECOND)
    assert sweep() == SweepReport(perform_step=1)
    assert [m.args for m in testing.enqueued("stepwise.perform_step")] == [(step.id,)]
    testing.drain()

    # Then the body ran, once, and the action succeeded
    session.refresh(car)
    assert car.mileage == 4
    action = session.scalars(select(Action)).one()
    assert action.status == status.SUCCEEDED
    assert session.scalar(select(Invocation.action_id).where(Invocation.id == invocation.id)) == action.id
    [event] = recovered(session)
    assert (event.action_id, event.step_id, event.cause) == (action.id, step.id, "sweeper")
    assert (event.data["job"], event.data["attempt"]) == ("stepwise.perform_step", 1)


def test_a_retry_whose_message_was_lost_is_sent_again_after_its_due_time(session: Session, car: Car) -> None:
    # Given a step whose first attempt failed, and whose retry message was lost
    tries: list[int] = []

    def flaky(car: Car) -> None:
        tries.append(1)
        if len(tries) == 1:
            raise RuntimeError("flaky")
        car.honk()

    engine.define(
        Car,
        "beep",
        flaky,
        retry=RetryPolicy(max_attempts=3, initial_interval=timedelta(seconds=10), jitter=0),
    )
    with testing.handle_exceptions():
        action = engine.now(car, "beep")
    lose_messages()

    # When the sweeper runs within the grace period after the retry was due, then after it
    testing.travel(timedelta(seconds=10) + GRACE - SECOND)
    assert sweep() == SweepReport()
    testing.travel(2 * SECOND)
    assert sweep() == SweepReport(perform_step=1)
    testing.drain()

    # Then the second attempt ran and succeeded
    assert reloaded(session, action).status == status.SUCCEEDED
    session.refresh(car)
    assert (len(tries), car.honks) == (2, 1)
    [event] = recovered(session)
    assert event.data["attempt"] == 2
