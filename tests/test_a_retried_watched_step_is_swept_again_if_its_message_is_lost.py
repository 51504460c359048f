"""A step with a heartbeat timeout whose action was cancelled while its body ran is left to
the watch while the body runs; once an operator retries the action, the sweeper looks
after the step again: if the retry's message is lost, the sweeper sends it again."""

from __future__ import annotations

from datetime import timedelta

import dramatiq
from sqlalchemy.orm import Session

import engine
from engine import StepContext, sweeper, testing
from engine.commands import cancel, retry
from engine.models import Action
from tests.domain import Car


def test_a_retried_watched_step_is_swept_again_if_its_message_is_lost(session: Session, car: Car) -> None:
    # Given an export with a heartbeat timeout, cancelled while its first attempt runs
    testing.freeze()
    runs: list[int] = []
    export = engine.define(Car, "export")

    @export.step(heartbeat_timeout=timedelta(seconds=30))
    def chunks(car: Car, step: StepContext) -> None:
        runs.append(step.step.attempt)
        if len(runs) == 1:
            assert cancel(step.action.id, by="ops")

    engine.later(car, "export")
    session.commit()
    testing.drain()
    action = session.query(Action).one()
    assert action.status == "cancelled"

    # When an operator retries it and the retry's message is lost
    assert retry(action.id, by="ops")
    dramatiq.get_broker().flush_all()

    # Then the sweeper sends the step again, and it runs
    testing.travel(sweeper.GRACE + timedelta(seconds=1))
    with engine.new_session() as sweeping:
        assert sweeper.sweep(sweeping).perform_step == 1
    testing.drain()
    session.expire_all()
    assert (session.get(Action, action.id).status, len(runs)) == ("succeeded", 2)
