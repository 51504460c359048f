"""Attempt timeout: the longest one attempt of a step body may run. An attempt past it
counts as failed (``AttemptTimedOut``, with its number, stored like any error) and follows
the retry policy; the action's own ``timeout`` is separate. A hung body is closed by its
attempt's check; a body that returns too late has its writes rolled back."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy.orm import Session

import engine
from engine import StepContext, metrics, testing
from engine.models import Action
from engine.retry import RetryPolicy
from tests.attempt_helpers import WorkerKilled, attempts, events
from tests.domain import Car

RETRY = RetryPolicy(max_attempts=2, initial_interval=timedelta(seconds=1), jitter=0)


def test_a_slow_attempt_times_out_and_the_retry_succeeds(session: Session, car: Car) -> None:
    # Given a sync whose first attempt takes 90 s of a 60 s attempt_timeout
    testing.freeze()
    runs: list[int] = []
    sync = engine.define(Car, "sync", retry=RETRY, timeout=timedelta(hours=1))

    @sync.step(attempt_timeout=timedelta(seconds=60))
    def pull(car: Car, step: StepContext) -> str:
        runs.append(step.step.attempt)
        car.honk()  # written in the attempt's transaction
        if len(runs) == 1:
            testing.travel(timedelta(seconds=90))
        return "synced"

    # When it runs, and its retry comes due
    action = engine.later(car, "sync")
    session.commit()
    testing.drain()
    testing.travel(timedelta(seconds=1))
    testing.drain()

    # Then the first attempt timed out (its writes rolled back), the second succeeded
    assert runs == [1, 2]
    session.expire_all()
    stored = session.get(Action, action.action_id)  # type: ignore[attr-defined]
    assert stored is not None and stored.status == "succeeded"
    assert session.get(Car, car.id).honks == 1  # type: ignore[union-attr]
    first, second = attempts(session, stored.id)
    assert (first.outcome, first.error_class) == ("timed_out", "engine.errors.AttemptTimedOut")
    assert "attempt 1 of step 'pull'" in (first.error_message or "")
    assert "attempt_timeout (60 s)" in (first.error_message or "")
    assert second.outcome == "succeeded"
    assert events(session, stored.id).count("attempt_failed") == 1
    assert "stepwise_attempt_timeouts_total 1.0" in metrics.render(session)


def test_a_hung_attempt_is_closed_by_its_check_and_the_last_one_fails_the_step(
    session: Session, car: Car
) -> None:
    # Given a step whose every attempt hangs (its worker stops there)
    testing.freeze()
    hang = engine.define(Car, "hang", retry=RETRY)

    @hang.step(attempt_timeout=30)
    def wait_forever(car: Car, step: StepContext) -> None:
        raise WorkerKilled

    action = engine.later(car, "hang")
    session.commit()
    with pytest.raises(WorkerKilled):
        testing.drain()

    # When the attempt timeout passes, the retry comes due and hangs too, and its timeout passes
    testing.travel(timedelta(seconds=31))
    testing.drain()  # the check closes attempt 1
    testing.travel(timedelta(seconds=1))
    with pytest.raises(WorkerKilled):
        testing.drain()
    testing.travel(timedelta(seconds=31))
    testing.drain()

    # Then both attempts timed out and the step failed with the error of the last one
    session.expire_all()
    stored = session.query(Action).one()
    assert (stored.status, stored.error_class) == ("failed", "engine.errors.AttemptTimedOut")
    assert [(a.attempt, a.outcome) for a in attempts(session, stored.id)] == [
        (1, "timed_out"),
        (2, "timed_out"),
    ]
    assert action is not None


def test_a_one_step_action_declares_its_attempt_timeout_on_the_action(session: Session, car: Car) -> None:
    # Given a one-step action (a plain method) with an attempt timeout on @action
    testing.freeze()
    calls: list[str] = []

    def wash(car: Car) -> None:
        calls.append("wash")
        if len(calls) == 1:
            testing.travel(timedelta(seconds=11))

    engine.define(Car, "wash", wash, attempt_timeout=timedelta(seconds=10), retry=RETRY)

    # When its first attempt runs too long and its retry comes due
    engine.later(car, "wash")
    session.commit()
    testing.drain()
    testing.travel(timedelta(seconds=1))
    testing.drain()

    # Then the first attempt timed out and the second succeeded
    stored = session.query(Action).one()
    assert (stored.status, calls) == ("succeeded", ["wash", "wash"])
    assert [a.outcome for a in attempts(session, stored.id)] == ["timed_out", "succeeded"]
