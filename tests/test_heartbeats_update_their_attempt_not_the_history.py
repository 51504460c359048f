"""Heartbeats update the attempt's row (last heartbeat, progress, checkpoint), never the
history: an attempt has one event for its start and one for its end, however chatty its
body. Heartbeats in a tight loop are throttled; what they reported is written with the
next one or with the attempt's end. Bad progress is refused, naming what is allowed."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

import engine
from engine import StepContext, testing
from engine.models import Action
from tests.attempt_helpers import attempts, events
from tests.domain import Car


@contextmanager
def attempt_updates(sa_engine: Engine) -> Iterator[list[str]]:
    seen: list[str] = []

    def count(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        if statement.startswith("UPDATE stepwise_attempts"):
            seen.append(statement)

    event.listen(sa_engine, "before_cursor_execute", count)
    try:
        yield seen
    finally:
        event.remove(sa_engine, "before_cursor_execute", count)


def test_a_thousand_heartbeats_write_no_history_and_are_throttled(
    session: Session, car: Car, database: Engine
) -> None:
    # Given an index rebuild that heartbeats a thousand times, a second apart every 100
    testing.freeze()
    rebuild = engine.define(Car, "rebuild")

    @rebuild.step(heartbeat_timeout=timedelta(minutes=1))
    def index(car: Car, step: StepContext) -> None:
        for row in range(1000):
            step.heartbeat(progress=row / 1000, checkpoint=row)
            if row % 100 == 99:
                testing.travel(timedelta(seconds=1))

    # When it runs
    with attempt_updates(database) as updates:
        engine.later(car, "rebuild")
        session.commit()
        testing.drain()

    # Then: 10 heartbeats written (one a second) and the attempt's end, no history for them
    assert len(updates) == 10 + 1
    stored = session.query(Action).one()
    assert stored.status == "succeeded"
    history = events(session, stored.id)
    assert history.count("attempt_started") == 1
    assert not [e for e in history if "heartbeat" in e]
    [only] = attempts(session, stored.id)
    assert (only.outcome, only.checkpoint, only.progress) == ("succeeded", 999, 0.999)
    assert only.heartbeat_at == testing.travel(timedelta()) - timedelta(seconds=1)


@pytest.mark.parametrize("progress", [1.5, -0.1, True, "x" * 201, {"done": 3}])
def test_bad_progress_is_refused(session: Session, car: Car, progress: object) -> None:
    # Given a body that reports a progress a heartbeat does not take
    refused: list[str] = []
    task = engine.define(Car, "task")

    @task.step(heartbeat_timeout=10)
    def work(car: Car, step: StepContext) -> None:
        with pytest.raises(engine.ArgumentError, match="progress") as error:
            step.heartbeat(progress=progress)
        refused.append(str(error.value))

    # When it runs, then the heartbeat raised a clear error and the body went on
    engine.later(car, "task")
    session.commit()
    testing.drain()
    assert len(refused) == 1
    assert session.query(Action).one().status == "succeeded"


def test_a_heartbeat_in_a_step_without_durable_attempts_says_what_to_declare(
    session: Session, car: Car
) -> None:
    task = engine.define(Car, "task")

    @task.step
    def work(car: Car, step: StepContext) -> None:
        step.heartbeat(progress=0.5)

    with testing.handle_exceptions():
        action = engine.now(car, "task")
    session.expire_all()
    stored = session.get(Action, action.id)
    assert stored is not None and stored.status == "failed"
    assert "declare heartbeat_timeout=" in (stored.error_message or "")
