"""The hot path does not get slower: an action whose steps register no compensation never
enters the compensation code and runs no statement on its table, whether it succeeds,
fails after retries or is cancelled with its tree (the action row's
``compensations_count``, read with the row, is the only thing looked at)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

import engine
from engine import RetryPolicy, commands, compensating, testing
from engine.models import Action
from tests.domain import Car


@contextmanager
def statements(sa_engine: Engine) -> Iterator[list[str]]:
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    event.listen(sa_engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(sa_engine, "before_cursor_execute", record)


def never_called(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("an action without compensations entered the compensation code")


def test_succeeding_failing_and_cancelled_actions_without_compensations_never_touch_them(
    session: Session, car: Car, database: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the compensation code made to fail if entered, and plain workflows: a trip that
    # drives then honks, one whose leg breaks down after a retry, and one waiting on an
    # outbound paint job
    for name in ("begin", "concluded", "start_next"):
        monkeypatch.setattr(compensating, name, never_called)
    twice = RetryPolicy(max_attempts=2, jitter=0, initial_interval=timedelta(0))
    engine.define(Car, "breakdown", Car.breakdown, retry=twice)
    engine.define(Car, "paint", Car.change_location, outbound=True)
    for name, child in (("trip", "honk"), ("broken_trip", "breakdown"), ("paint_trip", "paint")):
        flow = engine.define(Car, name)
        flow.step(lambda car, step: step.do("drive", 3))
        flow.step(lambda car, step, child=child: step.do(child, *(["red"] if child == "paint" else [])))

    # When they run (and the last is cancelled)
    with statements(database) as seen, testing.handle_exceptions():
        for name in ("trip", "broken_trip", "paint_trip"):
            engine.later(car, name)
            session.commit()
        testing.drain()
        waiting = session.scalars(select(Action.id).where(Action.name == "paint_trip")).one()
        assert commands.cancel(waiting)
        testing.drain()

    # Then they ended as before, and no statement read or wrote a compensation
    session.expire_all()
    ended = {name: state for name, state in session.execute(select(Action.name, Action.status))}
    assert (ended["trip"], ended["broken_trip"], ended["paint_trip"]) == ("succeeded", "failed", "cancelled")
    assert seen
    assert not [s for s in seen if "stepwise_compensations" in s]
    assert not [s for s in seen if "compensations_count" in s and s.lstrip().upper().startswith("UPDATE")]
