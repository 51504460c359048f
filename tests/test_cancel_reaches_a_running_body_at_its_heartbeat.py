"""Cancelling an action reaches its running body at the body's next heartbeat:
``step.heartbeat()`` raises ``engine.Cancelled``, the body cleans up, and its outcome is
discarded (the action is cancelled already; nothing is retried)."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy.orm import Session

import engine
from engine import StepContext, testing
from engine.commands import cancel
from engine.models import Action
from engine.retry import RetryPolicy
from tests.attempt_helpers import attempts, events
from tests.domain import Car


def test_a_cancelled_action_stops_its_body_at_the_next_heartbeat(session: Session, car: Car) -> None:
    # Given a long export that heartbeats each chunk and cleans up when stopped
    testing.freeze()
    done: list[int] = []
    cleaned: list[str] = []
    export = engine.define(Car, "export", retry=RetryPolicy(max_attempts=3, jitter=0))

    @export.step(heartbeat_timeout=timedelta(seconds=30))
    def chunks(car: Car, step: StepContext) -> None:
        try:
            for chunk in range(10):
                step.heartbeat(progress=f"chunk {chunk} of 10")
                done.append(chunk)
                if chunk == 2:  # an operator cancels while it runs
                    assert cancel(step.action.id, by="ops", reason="wrong month")
                testing.travel(timedelta(seconds=2))
        except engine.Cancelled as stop:
            cleaned.append(stop.reason)
            raise

    # When it runs
    action = engine.later(car, "export")
    session.commit()
    testing.drain()

    # Then the body stopped at the heartbeat after the cancel, cleaned up, and nothing was retried
    assert done == [0, 1, 2]
    assert cleaned == ["cancelled"]
    session.expire_all()
    stored = session.query(Action).one()
    assert stored.status == "cancelled"
    [only] = attempts(session, stored.id)
    assert (only.outcome, only.progress) == ("discarded", "chunk 3 of 10")
    assert "attempt_failed" not in events(session, stored.id)
    assert testing.enqueued("stepwise.perform_step") == []
    assert action is not None
