"""Given a job's message that was delivered and handled, when the broker delivers it again
(a redelivery after a lost acknowledgement, or a duplicate the sweeper sent), then the
second delivery changes nothing: the same rows, the same statuses, the same history, and
no new message.

Not a spec case: Stepped relies on Active Job delivering once (DESIGN invariant 2; issue 3,
"Redelivered and duplicate messages are no-ops"), one test per job. The second delivery
goes through the broker: the same message, enqueued again. The clock moves a second
between the deliveries, so that any write, even of a timestamp, would show.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import dramatiq
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import StepContext, db, status, testing
from engine.models import Action, ActionEvent
from engine.retry import RetryPolicy
from tests.domain import AppBase, Car

T = datetime(2025, 1, 2, 3, 4, 5)
SECOND = timedelta(seconds=1)


@pytest.fixture(autouse=True)
def frozen() -> Iterator[None]:
    testing.freeze(T)
    yield


def snapshot() -> dict[str, list[dict[str, Any]]]:
    """Every row of the engine's tables and of the example domain's, in key order."""
    tables = [*db.Base.metadata.sorted_tables, *AppBase.metadata.sorted_tables]
    with engine.new_session() as session:
        return {
            table.name: [
                dict(row._mapping)
                for row in session.execute(select(table).order_by(*table.primary_key.columns))
            ]
            for table in tables
        }


def queued() -> list[tuple[str, tuple[Any, ...]]]:
    return sorted((item.job, item.args) for item in testing.enqueued())


def deliver_twice(job: str) -> None:
    """Deliver the one queued message of ``job``; then deliver the same message again and
    check that the second delivery changed nothing."""
    [item] = testing.enqueued(job)
    message_id = item.message.message_id

    def this_message(candidate: testing.Enqueued) -> bool:
        return candidate.message.message_id == message_id

    assert testing.perform_enqueued(this_message) == 1
    before, messages = snapshot(), queued()

    testing.travel(SECOND)
    dramatiq.get_broker().enqueue(item.message)
    assert testing.perform_enqueued(this_message) == 1

    after = snapshot()
    for table, rows in before.items():
        assert after[table] == rows, f"the second delivery of {job} changed {table}"
    assert queued() == messages


def events(session: Session, action: Action) -> list[str]:
    query = select(ActionEvent.event).where(ActionEvent.action_id == action.id).order_by(ActionEvent.id)
    return list(session.scalars(query))


def reloaded(session: Session, action: Action) -> Action:
    session.expire_all()
    found = session.get(Action, action.id)
    assert found is not None
    return found


def test_an_admission_delivered_twice_admits_once(session: Session, car: Car) -> None:
    # Given a visit whose step starts a child, invoked for a worker
    visit = engine.define(Car, "visit")

    @visit.step
    def go(car: Car, step: StepContext) -> None:
        step.do("drive", 5)

    engine.later(car, "visit")
    session.commit()

    # When its admission is delivered twice (the second finds it admitted and its step run)
    deliver_twice("stepwise.admit")

    # Then one visit was admitted, and the tree completes once
    testing.drain()
    session.refresh(car)
    assert car.mileage == 5
    actions = session.scalars(select(Action).order_by(Action.id)).all()
    assert [(a.name, a.status) for a in actions] == [("visit", "succeeded"), ("drive", "succeeded")]
    assert events(session, actions[0]).count("completed") == 1


def test_a_child_admission_delivered_twice_after_the_tree_completed_changes_nothing(
    session: Session, car: Car
) -> None:
    # Given a child admission that already completed its tree
    visit = engine.define(Car, "visit")

    @visit.step
    def go(car: Car, step: StepContext) -> None:
        step.do("honk")

    parent = engine.now(car, "visit")

    # When the child's admission is delivered twice
    deliver_twice("stepwise.admit")

    # Then the child honked once and the parent succeeded once
    session.refresh(car)
    assert car.honks == 1
    assert reloaded(session, parent).status == status.SUCCEEDED
    assert events(session, parent).count("completed") == 1


def test_a_step_delivered_twice_runs_its_body_once(session: Session, car: Car) -> None:
    # Given a step whose first attempt failed and whose retry is due
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
    testing.travel(timedelta(seconds=10))

    # When the retry's message is delivered twice
    deliver_twice("stepwise.perform_step")

    # Then the body ran once more, and the action succeeded once
    session.refresh(car)
    assert (len(tries), car.honks) == (2, 1)
    assert reloaded(session, action).status == status.SUCCEEDED
    assert events(session, action).count("completed") == 1


def test_a_timeout_delivered_twice_times_out_once(session: Session, car: Car) -> None:
    # Given a visit waiting on an outbound child with a 5 second timeout, which has passed
    visit = engine.define(Car, "visit")

    @visit.step
    def go(car: Car, step: StepContext) -> None:
        step.do("change_location", "Paris")

    engine.define(Car, "change_location", outbound=True, timeout=timedelta(seconds=5))
    parent = engine.now(car, "visit")
    testing.drain()
    testing.travel(timedelta(seconds=6))

    # When the child's timeout is delivered twice
    deliver_twice("stepwise.timeout")

    # Then the child timed out once, and the parent failed once
    child = session.scalars(select(Action).where(Action.name == "change_location")).one()
    assert reloaded(session, child).status == status.TIMED_OUT
    assert reloaded(session, parent).status == status.FAILED
    assert events(session, child).count("completed") == 1
    assert events(session, parent).count("completed") == 1


def test_a_wait_delivered_twice_concludes_once(session: Session, car: Car) -> None:
    # Given a step waiting 60 seconds, which have passed
    park = engine.define(Car, "park")

    @park.step
    def wait(car: Car, step: StepContext) -> None:
        step.wait(60)

    @park.step
    def arrive(car: Car, step: StepContext) -> None:
        car.location = "garage"

    action = engine.now(car, "park")
    testing.travel(timedelta(seconds=60))

    # When the wait's message is delivered twice
    deliver_twice("stepwise.wait_over")

    # Then the step concluded once and the next step ran once
    assert reloaded(session, action).status == status.SUCCEEDED
    session.refresh(car)
    assert car.location == "garage"
    assert events(session, action).count("step_concluded") == 2


def test_an_outbound_completion_delivered_twice_completes_once(session: Session, car: Car) -> None:
    # Given an outbound action, and its completion sent to a worker
    engine.define(Car, "change_location", outbound=True)
    action = engine.now(car, "change_location", "Paris")
    engine.complete_later(car, "change_location", status.SUCCEEDED)
    session.commit()

    # When the completion is delivered twice
    deliver_twice("stepwise.complete")

    # Then the action succeeded once
    assert reloaded(session, action).status == status.SUCCEEDED
    assert events(session, action).count("completed") == 1


def test_a_completion_delivered_again_does_not_complete_the_next_action_in_the_lane(
    session: Session, car: Car
) -> None:
    # Given two outbound actions in one lane: the first performing, the second queued
    engine.define(Car, "change_location", outbound=True)
    first = engine.now(car, "change_location", "Paris")
    second = engine.now(car, "change_location", "Rome")
    engine.complete_later(car, "change_location", status.SUCCEEDED)
    session.commit()

    # When the completion meant for the first is delivered twice
    [item] = testing.enqueued("stepwise.complete")
    testing.drain()
    assert reloaded(session, second).status == status.PERFORMING
    dramatiq.get_broker().enqueue(item.message)
    testing.drain()

    # Then the second action still performs
    assert reloaded(session, first).status == status.SUCCEEDED
    assert reloaded(session, second).status == status.PERFORMING
