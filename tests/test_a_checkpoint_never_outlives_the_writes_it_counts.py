"""A body that writes to the database as it goes and checkpoints its progress: when the
attempt fails, its writes are rolled back, and so is every checkpoint it reported after
it began writing, so the next attempt resumes where the committed work ends (on SQLite and
PostgreSQL alike), never past work that was lost."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy.orm import Session

import engine
from engine import StepContext, testing
from engine.models import Action
from engine.retry import RetryPolicy
from tests.domain import Car


def test_a_checkpoint_never_outlives_the_writes_it_counts(session: Session, car: Car) -> None:
    # Given an odometer that drives 10 miles a chunk, checkpointing each, and fails once at chunk 3
    testing.freeze()
    failures = {"left": 1}
    odometer = engine.define(
        Car, "odometer", retry=RetryPolicy(max_attempts=2, initial_interval=timedelta(seconds=1), jitter=0)
    )

    @odometer.step(heartbeat_timeout=timedelta(seconds=60))
    def drive(car: Car, step: StepContext) -> None:
        for chunk in range(step.checkpoint or 0, 5):
            if chunk == 3 and failures["left"]:
                failures["left"] -= 1
                raise RuntimeError("flat tyre")
            car.mileage += 10
            step.session.flush()
            testing.travel(timedelta(seconds=2))  # past the heartbeat throttle
            step.heartbeat(progress=(chunk + 1) / 5, checkpoint=chunk + 1)

    # When it runs, fails, and is retried
    with testing.handle_exceptions():
        engine.later(car, "odometer")
        session.commit()
        testing.drain()
        testing.travel(timedelta(seconds=2))
        testing.drain()

    # Then every chunk's miles are there: the retry did not resume past rolled-back writes
    session.expire_all()
    assert session.query(Action).one().status == "succeeded"
    assert session.get(Car, car.id).mileage == 50  # type: ignore[union-attr]
