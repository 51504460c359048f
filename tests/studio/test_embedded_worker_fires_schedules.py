"""Given the embedded runtime of ``stepwise serve`` (the in-memory broker, an in-process
worker and its clock thread), a schedule declared in code is synced at start and its ticks
fire and run in this one process: ``scripts/studio`` shows schedules working with no
service installed."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from app.embedded import Embedded
from engine import schedules, testing
from engine.models import Tick
from tests.domain import Car
from tests.schedule_helpers import actions_started


@pytest.fixture(autouse=True)
def no_declarations() -> Iterator[None]:
    schedules.forget_declared()
    yield
    schedules.forget_declared()


def test_the_embedded_clock_fires_a_schedule_every_second(session: Session, car: Car) -> None:
    engine.define(Car, "honk", lambda car: car.honk())
    engine.schedule("honker", every=1, actor=car, action="honk", overlap="allow")
    runtime = Embedded(worker_threads=2, sweep_every=3600, tick_every=0.2)
    with testing.handle_exceptions():
        runtime.start()
        try:
            deadline = time.monotonic() + 10
            while (
                time.monotonic() < deadline and [a.status for a in actions_started()].count("succeeded") < 3
            ):
                time.sleep(0.1)
        finally:
            runtime.stop()
    assert [a.status for a in actions_started()].count("succeeded") >= 3
    with engine.new_session() as s:
        due = s.scalars(select(Tick.due_at).where(Tick.outcome == "fired")).all()
    assert len(due) == len(set(due)) >= 3
    assert all(d.microsecond == 0 for d in due)  # whole seconds: the interval's ticks
