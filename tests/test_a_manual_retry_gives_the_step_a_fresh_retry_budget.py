"""An operator's retry gives the failed step a fresh retry budget: a policy of 4 attempts
that was spent allows 4 more after the retry, with the policy's backoff from its start;
attempt numbers keep growing (each attempt keeps its own idempotency key).

Not a spec case: retry policies and operator retries are ours (issue 12, "Retry and skip").
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import StepContext, commands, testing
from engine.models import Action, ActionEvent, Step
from engine.retry import RetryPolicy
from tests.domain import Car


class Flat(Exception):
    pass


def failed_attempts(session: Session, action_id: int) -> list[int]:
    session.expire_all()
    events = session.scalars(
        select(ActionEvent)
        .where(ActionEvent.action_id == action_id, ActionEvent.event == "attempt_failed")
        .order_by(ActionEvent.id)
    )
    return [e.data["attempt"] for e in events]


def run_until_settled(rounds: int = 12) -> None:
    for _ in range(rounds):
        testing.drain()
        testing.travel(timedelta(minutes=1))


def test_a_retried_step_is_tried_as_often_as_its_policy_says_again(session: Session, car: Car) -> None:
    # Given a step with a policy of 4 attempts that always fails, and has spent them
    testing.freeze(testing.travel(timedelta()))
    keys: list[str] = []
    mend = engine.define(Car, "mend", retry=RetryPolicy(max_attempts=4, jitter=0))

    @mend.step
    def work(car: Car, step: StepContext) -> None:
        keys.append(step.idempotency_key)
        raise Flat(f"try {len(keys)}")

    with testing.handle_exceptions():
        action = engine.now(car, "mend")
        run_until_settled()
    assert (len(keys), failed_attempts(session, action.id)) == (4, [1, 2, 3])

    # When an operator retries it
    assert commands.retry(action.id, by="olga")
    with testing.handle_exceptions():
        run_until_settled()

    # Then it is tried 4 more times (3 of them automatic retries) before it fails again
    session.expire_all()
    assert session.get(Action, action.id).status == "failed"  # type: ignore[union-attr]
    assert len(keys) == 8
    assert failed_attempts(session, action.id) == [1, 2, 3, 5, 6, 7]
    # and every attempt had its own idempotency key
    assert len(set(keys)) == 8


def test_the_backoff_starts_again_from_the_policys_first_interval(session: Session, car: Car) -> None:
    # Given a spent policy whose intervals grow 10 s, 20 s, 40 s
    testing.freeze(testing.travel(timedelta()))
    policy = RetryPolicy(max_attempts=3, initial_interval=timedelta(seconds=10), jitter=0)
    engine.define(Car, "mend", Car.breakdown, retry=policy)
    with testing.handle_exceptions():
        action = engine.now(car, "mend")
        run_until_settled()

    # When it is retried and its first attempt fails
    assert commands.retry(action.id, by="olga")
    retried_at = testing.travel(timedelta())
    with testing.handle_exceptions():
        testing.drain()

    # Then the next attempt is due 10 s later, not 40 s
    session.expire_all()
    step = session.scalars(select(Step).where(Step.action_id == action.id)).one()
    assert step.retry_at == retried_at + timedelta(seconds=10)


def test_a_step_that_failed_at_once_gets_its_whole_budget_after_a_retry(session: Session, car: Car) -> None:
    # Given a step that failed on its first attempt with an error not worth retrying
    testing.freeze(testing.travel(timedelta()))
    calls: list[int] = []
    mend = engine.define(Car, "mend", retry=RetryPolicy(max_attempts=3, jitter=0, non_retryable=(Flat,)))

    @mend.step
    def work(car: Car, step: StepContext) -> None:
        calls.append(1)
        raise Flat("no") if len(calls) == 1 else RuntimeError("still flat")

    with testing.handle_exceptions():
        action = engine.now(car, "mend")
    assert len(calls) == 1

    # When it is retried and keeps failing with retryable errors
    assert commands.retry(action.id, by="olga")
    with testing.handle_exceptions():
        run_until_settled()

    # Then it was tried the policy's 3 times after the retry
    assert len(calls) == 4
