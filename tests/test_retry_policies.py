"""Retry policies: a failing step body is tried again with exponential backoff and
jitter; non-retryable errors and exhausted attempts fail the action as in Stepped."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import StepContext, testing
from engine.models import Action, ActionEvent, Step
from engine.retry import RetryPolicy
from tests.domain import Car


class Flaky(Exception):
    pass


class Broken(Exception):
    pass


def attempts(session: Session, action_id: int) -> list[ActionEvent]:
    query = select(ActionEvent).where(
        ActionEvent.action_id == action_id, ActionEvent.event == "attempt_failed"
    )
    return list(session.scalars(query.order_by(ActionEvent.id)))


def test_intervals_grow_exponentially_up_to_the_cap() -> None:
    policy = RetryPolicy(
        max_attempts=10,
        initial_interval=timedelta(seconds=1),
        backoff=2,
        max_interval=timedelta(seconds=10),
        jitter=0,
    )
    assert [policy.interval(n).total_seconds() for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]


def test_jitter_spreads_intervals_within_its_fraction() -> None:
    policy = RetryPolicy(initial_interval=timedelta(seconds=10), jitter=0.2)
    rng = random.Random(7)
    samples = [policy.interval(1, rng).total_seconds() for _ in range(200)]
    assert min(samples) >= 8 and max(samples) <= 12
    assert len({round(s, 3) for s in samples}) > 100


def test_a_policy_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        RetryPolicy(max_attempts=0)


def test_a_flaky_step_is_retried_until_it_succeeds_and_each_attempt_is_recorded(
    session: Session, car: Car
) -> None:
    """Given a step that fails twice, when its retries come due, the third attempt
    succeeds; the two failures are in the history with their errors and the time of the
    next attempt, and each attempt saw its own idempotency key."""
    testing.freeze(testing.travel(timedelta()))
    keys: list[str] = []
    deliver = engine.define(
        Car, "deliver", retry=RetryPolicy(max_attempts=5, initial_interval=timedelta(seconds=10), jitter=0)
    )

    @deliver.step
    def send(car: Car, step: StepContext) -> None:
        keys.append(step.idempotency_key)
        car.honk()
        if len(keys) < 3:
            raise Flaky(f"try {len(keys)}")

    with testing.handle_exceptions():
        action = engine.now(car, "deliver")
        session.expire_all()
        step = session.scalars(select(Step).where(Step.action_id == action.id)).one()
        assert (action.status, step.attempt, step.performed_at) == ("performing", 2, None)
        assert step.retry_at == testing.travel(timedelta()) + timedelta(seconds=10)

        assert testing.drain() == 0  # not due yet
        testing.travel(timedelta(seconds=10))
        assert testing.drain() == 1  # second attempt fails, the third is due 20 s later
        testing.travel(timedelta(seconds=20))
        assert testing.drain() == 1

    session.expire_all()
    assert session.get(Action, action.id).status == "succeeded"  # type: ignore[union-attr]
    assert keys == [f"stepwise:{action.id}:0:{n}" for n in (1, 2, 3)]
    assert car.honks == 1  # the failed attempts' changes were rolled back
    failures = attempts(session, action.id)
    assert [(e.data["attempt"], e.data["error_message"]) for e in failures] == [(1, "try 1"), (2, "try 2")]
    assert all("Flaky" in e.data["traceback"] for e in failures)
    assert failures[0].data["next_attempt_at"] < failures[1].data["next_attempt_at"]


def test_a_non_retryable_error_fails_at_once(session: Session, car: Car) -> None:
    engine.define(
        Car,
        "deliver",
        lambda car: (_ for _ in ()).throw(Broken("no")),
        retry=RetryPolicy(max_attempts=5, non_retryable=(Broken,)),
    )
    with testing.handle_exceptions():
        action = engine.now(car, "deliver")
    assert action.status == "failed"
    assert attempts(session, action.id) == []
    session.expire_all()
    assert session.get(Action, action.id).error_message == "no"  # type: ignore[union-attr]


def test_exhausted_attempts_fail_the_action_and_its_parent(session: Session, car: Car) -> None:
    """Given a child that always fails with 3 attempts, when they are used up, the child
    fails and so does the tree above it, as in the spec."""
    testing.freeze(testing.travel(timedelta()))
    engine.define(Car, "deliver", Car.breakdown, retry=RetryPolicy(max_attempts=3, jitter=0))
    trip = engine.define(Car, "trip")

    @trip.step
    def go(car: Car, step: StepContext) -> None:
        step.do("deliver")

    with testing.handle_exceptions():
        parent = engine.now(car, "trip")
        for _ in range(5):
            testing.drain()
            testing.travel(timedelta(minutes=1))
    session.expire_all()
    child = session.scalars(select(Action).where(Action.name == "deliver")).one()
    assert (child.status, session.get(Action, parent.id).status) == ("failed", "failed")  # type: ignore[union-attr]
    assert [e.data["attempt"] for e in attempts(session, child.id)] == [1, 2]
    assert child.error_message == "breakdown"


def test_retry_accepts_a_number_of_attempts(session: Session, car: Car) -> None:
    definition = engine.define(Car, "deliver", retry=4)
    assert definition.retry.max_attempts == 4
