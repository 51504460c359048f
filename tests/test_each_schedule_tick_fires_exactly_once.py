"""Given a schedule, when the clock ticks (as often as it likes, from as many processes as
run), then each tick of the rule starts its action once: the tick's unique row is won by
one transaction only, and that transaction invokes the action through the engine's
ordinary invocation (admitted by a worker, recorded in its history)."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import schedules, testing
from engine.models import ActionEvent, Tick
from engine.schedules import firing
from tests.domain import Car
from tests.schedule_helpers import MONDAY, actions_started, honking, run_clock, schedule_row, ticks


def test_a_tick_fires_once_however_often_the_clock_runs(car: Car, session: Session) -> None:
    # Given a minutely schedule, created at 08:59:30
    testing.freeze(MONDAY)
    honking(car)
    assert schedule_row().next_fire_at == MONDAY.replace(second=0) + timedelta(minutes=1)

    # When the clock runs before the tick, nothing fires
    assert run_clock().fired == 0

    # When it runs at 09:00:00.2 and again and again
    testing.travel(timedelta(seconds=30.2))
    assert run_clock().fired == 1
    assert run_clock().fired == 0
    assert run_clock().fired == 0

    # Then one action ran, for the 09:00 tick, through the engine's normal path
    [tick] = ticks()
    assert tick.due_at == MONDAY.replace(minute=0, hour=9, second=0)
    assert tick.outcome == schedules.FIRED
    assert tick.lag_seconds == pytest.approx(0.2)
    [honk] = actions_started()
    assert honk.status == "succeeded"
    session.refresh(car)
    assert car.honks == 1
    # And the next tick is at 09:01
    assert schedule_row().next_fire_at == MONDAY.replace(hour=9, minute=1, second=0)

    # When the next minute comes, it fires its own tick
    testing.travel(timedelta(minutes=1))
    assert run_clock().fired == 1
    assert [t.due_at.minute for t in ticks()] == [0, 1]
    assert len(actions_started()) == 2


def test_the_history_says_a_schedule_started_the_action(car: Car) -> None:
    testing.freeze(MONDAY)
    honking(car)
    testing.travel(timedelta(seconds=31))
    run_clock()
    [tick] = ticks()
    with engine.new_session() as s:
        event = s.scalar(select(ActionEvent).where(ActionEvent.event == "scheduled"))
        assert event is not None
        assert event.invocation_id == tick.invocation_id
        assert event.cause == firing.SCHEDULE
        assert event.data["schedule"] == "honker"


def test_an_insert_that_finds_its_tick_taken_invokes_nothing(car: Car) -> None:
    # Given a tick already recorded by another clock (the row lock was skipped somehow)
    testing.freeze(MONDAY)
    schedule = honking(car)
    due = MONDAY.replace(hour=9, minute=0, second=0)
    with engine.new_session() as s:
        s.add(Tick(schedule_id=schedule.id, due_at=due, fired_at=due, outcome="fired", manual=False))
        s.commit()

    # When this clock fires the same tick
    testing.travel(timedelta(seconds=31))
    report = run_clock()

    # Then it invokes nothing, and still moves the schedule on
    assert report.fired == 0
    assert actions_started() == []
    assert schedule_row().next_fire_at == due + timedelta(minutes=1)


@pytest.mark.postgresql_only
def test_clocks_racing_in_threads_fire_each_tick_once(car: Car) -> None:
    # Given a schedule due every second, and eight clocks ticking at once, ten times
    testing.freeze(MONDAY)
    honking(car, every=1)
    testing.travel(timedelta(seconds=1.5))
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def clock_process() -> None:
        try:
            for _ in range(10):
                barrier.wait()
                schedules.tick()
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=clock_process) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors

    # Then the one due tick fired once
    with engine.new_session() as s:
        fired = s.scalars(select(Tick).where(Tick.outcome == "fired")).all()
    assert len(fired) == 1
    testing.drain()
    assert len(actions_started()) == 1


def test_a_tick_with_nothing_due_is_one_query_and_says_when_to_look_again(car: Car, session: Session) -> None:
    from sqlalchemy import event

    testing.freeze(MONDAY)
    honking(car)
    statements: list[str] = []
    sa_engine = session.get_bind()
    listen = lambda *args: statements.append(args[2])  # noqa: E731 - (conn, cursor, statement, ...)
    event.listen(sa_engine, "before_cursor_execute", listen)
    try:
        report = schedules.tick()
    finally:
        event.remove(sa_engine, "before_cursor_execute", listen)
    assert [s for s in statements if s.lstrip().upper().startswith("SELECT")] == statements
    assert len(statements) == 1
    assert report.next_at == MONDAY.replace(hour=9, minute=0, second=0)
