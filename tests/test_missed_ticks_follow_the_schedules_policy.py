"""Given a schedule whose clock was down for several ticks, when a clock runs again, then
the missed ticks follow the schedule's ``missed`` policy: ``skip`` fires none of them (one
visible "missed" row counts them) and waits for the next tick; ``run_once`` fires one
catch-up run now for all of them. A tick a little late (under ``MISSED_AFTER``) is not
missed: it fires."""

from __future__ import annotations

from datetime import timedelta

from engine import schedules, testing
from tests.domain import Car
from tests.schedule_helpers import MONDAY, actions_started, honking, run_clock, schedule_row, ticks

NINE = MONDAY.replace(hour=9, minute=0, second=0)


def test_skip_fires_none_of_the_missed_ticks_and_waits_for_the_next(car: Car) -> None:
    # Given an hourly schedule whose clock stopped at 08:59:30 and came back at 11:30
    testing.freeze(MONDAY)
    honking(car, cron="0 * * * *", missed="skip")
    testing.travel(timedelta(hours=2, seconds=30, minutes=30))

    # When the clock runs
    report = run_clock()

    # Then nothing ran: one row says the three ticks (09:00, 10:00, 11:00) were missed
    assert report.missed == 1 and report.fired == 0
    [missed] = ticks()
    assert missed.outcome == schedules.MISSED
    assert missed.missed_count == 3
    assert missed.due_at == NINE + timedelta(hours=2)
    assert "3 ticks missed" in (missed.note or "")
    assert actions_started() == []
    # And the schedule waits for 12:00, which fires on time
    assert schedule_row().next_fire_at == NINE + timedelta(hours=3)
    assert run_clock().missed == 0
    testing.travel(timedelta(minutes=30))
    assert run_clock().fired == 1
    assert len(actions_started()) == 1


def test_run_once_fires_one_catch_up_run_for_all_the_missed_ticks(car: Car) -> None:
    testing.freeze(MONDAY)
    honking(car, cron="0 * * * *", missed="run_once")
    testing.travel(timedelta(hours=2, seconds=30, minutes=30))

    report = run_clock()

    # One run, now, for the latest of the three missed ticks
    assert report.fired == 1
    [tick] = ticks()
    assert tick.outcome == schedules.FIRED
    assert tick.due_at == NINE + timedelta(hours=2)
    assert tick.missed_count == 2
    assert tick.lag_seconds == 30 * 60
    assert "catch-up run for 3 missed ticks" in (tick.note or "")
    assert [a.status for a in actions_started()] == ["succeeded"]
    assert schedule_row().next_fire_at == NINE + timedelta(hours=3)
    # And running the clock again changes nothing
    assert run_clock().fired == 0


def test_a_dense_schedule_fires_its_current_tick_and_counts_the_earlier_ones(car: Car) -> None:
    # Given a minutely schedule down from 08:59:30 to 09:10:30 (eleven ticks due)
    testing.freeze(MONDAY)
    honking(car, missed="skip")
    testing.travel(timedelta(minutes=11))

    # Then the 09:10 tick, 30 s late, is on time and fires; the ten before it were missed
    assert run_clock().fired == 1
    [tick] = ticks()
    assert tick.due_at == NINE + timedelta(minutes=10)
    assert tick.missed_count == 10
    assert "10 earlier ticks missed" in (tick.note or "")


def test_a_tick_a_little_late_is_not_missed(car: Car) -> None:
    testing.freeze(MONDAY)
    honking(car, missed="skip")
    testing.travel(timedelta(seconds=30) + schedules.MISSED_AFTER - timedelta(seconds=1))

    assert run_clock().fired == 1
    [tick] = ticks()
    assert tick.missed_count == 0
    assert tick.lag_seconds == schedules.MISSED_AFTER.total_seconds() - 1


def test_a_long_downtime_of_a_dense_schedule_is_counted_not_replayed(car: Car) -> None:
    # Given an every-second schedule down for a day (86,400 ticks)
    testing.freeze(MONDAY)
    honking(car, every=1, missed="run_once")
    testing.travel(timedelta(days=1))

    # Then one run, for the latest tick (on time), the rest counted
    assert run_clock().fired == 1
    [tick] = ticks()
    assert tick.due_at == MONDAY + timedelta(days=1)
    assert tick.missed_count == 86_399
