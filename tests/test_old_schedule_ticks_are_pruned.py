"""Given schedules with many ticks, when old ticks are pruned (the clock does it hourly),
then each schedule keeps its newest ``KEEP`` ticks, and always its newest tick that started
an action, so the overlap check still sees a run that goes on; a pruned tick never fires
again, and a schedule with few ticks is left alone."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select

import engine
from engine import schedules, testing
from engine.models import Tick
from tests.domain import Car
from tests.schedule_helpers import MONDAY, actions_started, honking, run_clock, ticks


def add_skipped_ticks(schedule_id: int, count: int) -> None:
    with engine.new_session() as s:
        for n in range(count):
            at = MONDAY + timedelta(seconds=31 + n)
            s.add(Tick(schedule_id=schedule_id, due_at=at, fired_at=at, outcome="skipped"))
        s.commit()


def test_each_schedule_keeps_its_newest_ticks_and_its_last_run(car: Car) -> None:
    # Given a schedule whose run goes on, and twenty ticks skipped since
    testing.freeze(MONDAY)
    busy = honking(car, overlap="skip")
    engine.define(Car, "honk", lambda car: None, outbound=True)
    testing.travel(timedelta(seconds=30))
    run_clock()
    add_skipped_ticks(busy.id, 20)
    quiet = honking(car, name="quiet", every=3600)

    # When the ticks are pruned down to the newest five
    deleted = schedules.prune(keep=5)

    # Then the five newest and the tick of the run that goes on are kept
    kept = ticks()
    assert deleted == 15
    assert len(kept) == 6
    assert kept[0].invocation_id is not None
    assert ticks("quiet") == []
    assert quiet is not None
    # And the overlap check still sees the run that goes on
    testing.travel(timedelta(minutes=1))
    assert run_clock().skipped == 1
    assert len(actions_started()) == 1


def test_a_pruned_tick_never_fires_again(car: Car) -> None:
    testing.freeze(MONDAY - timedelta(seconds=30))
    honking(car, every=1, overlap="allow")
    for _ in range(10):
        testing.travel(timedelta(seconds=1))
        run_clock()
    assert schedules.prune(keep=3) == 7
    for _ in range(3):
        testing.travel(timedelta(seconds=1))
        run_clock()
    with engine.new_session() as s:
        due = s.scalars(select(Tick.due_at).order_by(Tick.id)).all()
    assert len(due) == len(set(due)) == 6
    assert len(actions_started()) == 13
