"""An operator's retry of an action whose heartbeating step ran out of attempts starts a
new attempt of that step (a new run of attempt numbers), and it resumes from the last
checkpoint its earlier attempts reported."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy.orm import Session

import engine
from engine import StepContext, commands, testing
from engine.models import Action
from tests.attempt_helpers import attempts
from tests.domain import Car


def test_a_retried_action_resumes_its_durable_step_from_the_checkpoint(session: Session, car: Car) -> None:
    # Given an import that checkpoints row 40, then fails (no retry policy)
    starts: list[object] = []
    load = engine.define(Car, "load")

    @load.step(heartbeat_timeout=timedelta(seconds=30))
    def rows(car: Car, step: StepContext) -> int:
        starts.append(step.checkpoint)
        if step.checkpoint is None:
            step.heartbeat(progress=0.4, checkpoint=40)
            raise RuntimeError("the source went away")
        return 100

    with testing.handle_exceptions():
        engine.later(car, "load")
        session.commit()
        testing.drain()
    action = session.query(Action).one()
    assert action.status == "failed"

    # When an operator retries it
    assert commands.retry(action.id, by="ops")
    testing.drain()

    # Then the step ran again from row 40, as attempt 2, and the action succeeded
    assert starts == [None, 40]
    session.expire_all()
    stored = session.get(Action, action.id)
    assert stored is not None and (stored.status, engine.result_of(stored)) == ("succeeded", 100)
    assert [(a.attempt, a.outcome) for a in attempts(session, action.id)] == [(1, "failed"), (2, "succeeded")]
