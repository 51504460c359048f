"""A body whose attempt was closed while it ran (its heartbeats stopped for longer than
the heartbeat timeout, so the watch considered it lost and sent the next attempt) never
concludes: when it returns, its writes are rolled back and its outcome is dropped; the
next attempt's outcome is the one that counts."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy.orm import Session

import engine
from engine import StepContext, testing
from engine.models import Action
from engine.retry import RetryPolicy
from tests.attempt_helpers import attempts
from tests.domain import Car


def test_a_body_back_after_its_attempt_was_closed_changes_nothing(session: Session, car: Car) -> None:
    # Given a sync whose first attempt goes quiet for 15 s of a 10 s heartbeat timeout
    testing.freeze()
    runs: list[int] = []
    sync = engine.define(
        Car, "sync", retry=RetryPolicy(max_attempts=2, initial_interval=timedelta(seconds=1), jitter=0)
    )

    @sync.step(heartbeat_timeout=timedelta(seconds=10))
    def pull(car: Car, step: StepContext) -> str:
        runs.append(step.step.attempt)
        step.heartbeat(progress=0.0)
        car.honk()
        if len(runs) == 1:
            testing.travel(timedelta(seconds=15))
            # Meanwhile the watch finds the attempt lost and sends the next one.
            assert testing.drain(lambda item: item.job == "stepwise.check_attempt") == 1
        return f"attempt {step.step.attempt}"

    # When it runs, returns late, and its next attempt runs
    engine.later(car, "sync")
    session.commit()
    testing.drain()
    testing.travel(timedelta(seconds=1))
    testing.drain()

    # Then the late body's honk and result were dropped; the second attempt's stand
    assert runs == [1, 2]
    session.expire_all()
    action = session.query(Action).one()
    assert (action.status, engine.result_of(action)) == ("succeeded", "attempt 2")
    assert session.get(Car, car.id).honks == 1  # type: ignore[union-attr]
    assert [(a.attempt, a.outcome) for a in attempts(session, action.id)] == [(1, "lost"), (2, "succeeded")]
