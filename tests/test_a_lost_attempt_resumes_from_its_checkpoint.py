"""Heartbeats and checkpoints: a body whose heartbeats stop (its worker died) is
considered lost once its heartbeat timeout passes, and is retried; the next attempt reads
the last checkpoint and resumes from it. The lost attempt is on record with its error."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy.orm import Session

import engine
from engine import StepContext, metrics, sweeper, testing
from engine.models import Action
from engine.retry import RetryPolicy
from tests.attempt_helpers import WorkerKilled, attempts, events
from tests.domain import Car


def declare_report(processed: list[int], die_after: int | None) -> None:
    report = engine.define(
        Car, "report", retry=RetryPolicy(max_attempts=3, initial_interval=timedelta(seconds=1), jitter=0)
    )

    @report.step(heartbeat_timeout=timedelta(seconds=10))
    def chunks(car: Car, step: StepContext, total: int) -> str:
        start = step.checkpoint or 0
        for chunk in range(start, total):
            processed.append(chunk)
            step.heartbeat(progress=chunk / total, checkpoint=chunk + 1)
            testing.travel(timedelta(seconds=2))  # each chunk takes a while
            if die_after is not None and chunk + 1 == die_after and len(processed) == die_after:
                raise WorkerKilled
        return f"{total} chunks"


@pytest.mark.parametrize("watch", ["the attempt's check", "the sweeper"])
def test_a_body_whose_heartbeats_stop_is_retried_from_its_checkpoint(
    session: Session, car: Car, watch: str
) -> None:
    # Given a report of 6 chunks whose worker dies after chunk 3 was checkpointed
    testing.freeze()
    processed: list[int] = []
    declare_report(processed, die_after=3)
    engine.later(car, "report", 6)
    session.commit()
    with pytest.raises(WorkerKilled):
        testing.drain()
    action = session.query(Action).one()
    [lost] = attempts(session, action.id)
    assert (lost.outcome, lost.checkpoint, lost.progress) == (None, 3, pytest.approx(2 / 6))

    # When no heartbeat comes for the heartbeat timeout (and the watch looks)
    testing.travel(timedelta(seconds=7))  # the last heartbeat was 2 s before it died
    testing.drain()
    assert attempts(session, action.id)[0].ended_at is None  # not yet: 9 s since the last one
    testing.travel(timedelta(seconds=2))
    if watch == "the sweeper":
        testing.drain(lambda item: item.job != "stepwise.check_attempt")
        with engine.new_session() as sweeping:
            assert sweeper.sweep(sweeping).attempts == 1
    testing.drain()
    testing.travel(timedelta(seconds=1))  # the retry's interval
    testing.drain()

    # Then the attempt was closed as lost and the next one resumed at chunk 3
    session.expire_all()
    assert session.get(Action, action.id).status == "succeeded"  # type: ignore[union-attr]
    assert processed == [0, 1, 2, 3, 4, 5]
    first, second = attempts(session, action.id)
    assert (first.attempt, first.outcome, first.error_class) == (1, "lost", "engine.errors.HeartbeatTimedOut")
    assert "no heartbeat since" in (first.error_message or "")
    assert (second.attempt, second.outcome, second.checkpoint) == (2, "succeeded", 6)
    history = events(session, action.id)
    assert history.count("attempt_started") == 2
    assert "attempt_failed" in history
    exposition = metrics.render(session)
    assert "stepwise_heartbeat_timeouts_total 1.0" in exposition
    assert 'stepwise_attempt_queue_latency_seconds_count{name="report"} 2.0' in exposition


def test_a_checkpoint_survives_a_failed_attempt(session: Session, car: Car) -> None:
    # Given a body that checkpoints, then fails, on its first attempt
    testing.freeze()
    seen: list[object] = []
    copy = engine.define(
        Car, "copy", retry=RetryPolicy(max_attempts=2, initial_interval=timedelta(seconds=1), jitter=0)
    )

    @copy.step(heartbeat_timeout=30)
    def rows(car: Car, step: StepContext) -> None:
        seen.append(step.checkpoint)
        if step.checkpoint is None:
            step.heartbeat(checkpoint={"row": 500})
            step.heartbeat(checkpoint={"row": 900})  # throttled: written with the attempt's end
            raise RuntimeError("connection reset")

    # When it runs and is retried
    with testing.handle_exceptions():
        action = engine.now(car, "copy")  # a durable attempt runs on a worker: here, the drain
        testing.drain()
        testing.travel(timedelta(seconds=1))
        testing.drain()

    # Then the second attempt started from the last checkpoint of the first
    assert seen == [None, {"row": 900}]
    session.expire_all()
    assert session.get(Action, action.id).status == "succeeded"  # type: ignore[union-attr]
