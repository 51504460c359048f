"""Recovery steps: once a step's retries are exhausted, ``recover="name"`` goes to that step
instead of failing the action. The recovery step reads ``step.failure``: the error's class
and message, the attempt, and ``may_have_run`` - True when the failed attempt's start was
recorded before its body ran (it raised, timed out or was lost), False when it certainly
did not run (it never started: its actor was gone). The history names the failure."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import StepContext, sweeper, testing
from engine.models import Action, ActionEvent
from engine.retry import RetryPolicy
from tests.attempt_helpers import WorkerKilled
from tests.domain import Car


class PaymentDeclined(Exception):
    pass


def declare_order(seen: list[Any], *, delete_the_car: bool) -> None:
    order = engine.define(
        Car, "order", retry=RetryPolicy(max_attempts=2, initial_interval=timedelta(seconds=1), jitter=0)
    )

    @order.step
    def reserve(car: Car, step: StepContext) -> None:
        if delete_the_car:
            step.session.delete(car)  # the actor is gone before the charge starts

    @order.step(recover="refund")
    def charge(car: Car, step: StepContext) -> None:
        seen.append(f"charge {step.step.attempt}")
        raise PaymentDeclined("card declined")

    @order.step
    def ship(car: Car, step: StepContext) -> None:
        seen.append("ship")

    @order.step
    def refund(car: Car | None, step: StepContext) -> str:
        seen.append(step.failure)
        return "refunded" if step.failure and step.failure.may_have_run else "nothing to refund"


def recovering(session: Session, action_id: int) -> dict[str, Any]:
    return session.scalars(
        select(ActionEvent.data).where(ActionEvent.action_id == action_id, ActionEvent.event == "recovering")
    ).one()


def test_a_recovery_step_is_told_the_failed_attempt_may_have_run(session: Session, car: Car) -> None:
    # Given an order whose charge is declined on both attempts
    testing.freeze()
    seen: list[Any] = []
    declare_order(seen, delete_the_car=False)

    # When it runs out of retries
    with testing.handle_exceptions():
        engine.later(car, "order")
        session.commit()
        testing.drain()
        testing.travel(timedelta(seconds=1))
        testing.drain()

    # Then the refund step ran instead of failing the order, knowing the charge may have happened
    assert seen[:2] == ["charge 1", "charge 2"]
    failure = seen[2]
    assert isinstance(failure, engine.Failure)
    assert failure.error_class == f"{__name__}.PaymentDeclined"
    assert (failure.message, failure.attempt, failure.may_have_run) == ("card declined", 2, True)
    assert (failure.step, failure.outcome) == ("charge", "failed")
    assert "ship" not in seen
    session.expire_all()
    action = session.query(Action).one()
    assert (action.status, engine.result_of(action)) == ("succeeded", "refunded")
    event = recovering(session, action.id)
    assert (event["to"], event["class"], event["may_have_run"]) == (
        "refund",
        f"{__name__}.PaymentDeclined",
        True,
    )


def test_a_recovery_step_is_told_the_failed_attempt_did_not_run(session: Session, car: Car) -> None:
    # Given an order whose car is deleted before its charge can start
    seen: list[Any] = []
    declare_order(seen, delete_the_car=True)

    # When it runs
    engine.later(car, "order")
    session.commit()
    testing.drain()

    # Then the charge never started, and the refund step (on no actor) knows it did not run
    assert [s for s in seen if isinstance(s, str)] == []
    [failure] = seen
    assert (failure.error_class, failure.may_have_run, failure.outcome) == (
        "engine.errors.ActorNotFound",
        False,
        "not_started",
    )
    session.expire_all()
    action = session.query(Action).one()
    assert (action.status, engine.result_of(action)) == ("succeeded", "nothing to refund")
    assert recovering(session, action.id)["may_have_run"] is False


def test_an_attempt_lost_with_its_worker_may_have_run(session: Session, car: Car) -> None:
    # Given a charge (no retries) whose worker dies while the body runs
    testing.freeze()
    seen: list[Any] = []
    order = engine.define(Car, "order")

    @order.step(recover="refund")
    def charge(car: Car, step: StepContext) -> None:
        raise WorkerKilled

    @order.step
    def refund(car: Car, step: StepContext) -> None:
        seen.append(step.failure)

    engine.later(car, "order")
    session.commit()
    with pytest.raises(WorkerKilled):
        testing.drain()

    # When the sweeper finds the step's body never concluded and sends it again
    testing.travel(sweeper.GRACE + timedelta(seconds=1))
    with engine.new_session() as sweeping:
        assert sweeper.sweep(sweeping).perform_step == 1
    testing.drain()

    # Then its open attempt is known lost, and the refund step knows the charge may have run
    [failure] = seen
    assert (failure.error_class, failure.outcome, failure.may_have_run) == (
        "engine.errors.AttemptLost",
        "lost",
        True,
    )
    assert "never concluded" in failure.message
