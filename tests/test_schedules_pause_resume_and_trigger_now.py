"""Given a schedule, when an operator pauses it, then its ticks stop; when they resume it,
then it ticks again from the time of resuming, and the ticks due while it was paused are
not run (no back-fire). "Trigger now" runs its action at once, recorded as a manual tick,
whatever the overlap policy and even while paused. Each command is audited; a schedule
deleted stops and leaves the actions it started."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

import engine
from engine import schedules, testing
from engine.models import ActionEvent, AuditEntry, Schedule
from tests.domain import Car
from tests.schedule_helpers import MONDAY, actions_started, honking, run_clock, schedule_row, ticks

NINE = MONDAY.replace(hour=9, minute=0, second=0)


def audit_trail() -> list[tuple[str, str | None, str | None]]:
    with engine.new_session() as s:
        return [(e.command, e.by, e.result) for e in s.scalars(select(AuditEntry).order_by(AuditEntry.id))]


def test_a_paused_schedule_does_not_tick_and_resuming_does_not_back_fire(car: Car) -> None:
    testing.freeze(MONDAY)
    honking(car)

    # When it is paused, its ticks do not fire
    assert schedules.pause("honker", by="olga", reason="maintenance") is True
    assert schedules.pause("honker", by="olga") is False  # already paused
    assert schedule_row().paused_by == "olga"
    testing.travel(timedelta(minutes=5))
    assert run_clock().fired == 0
    assert ticks() == []

    # When it is resumed at 09:04:30, it next fires at 09:05, and 09:00..09:04 never run
    assert schedules.resume("honker", by="olga") is True
    assert schedules.resume("honker", by="olga") is False
    assert schedule_row().next_fire_at == NINE + timedelta(minutes=5)
    assert run_clock().fired == 0
    testing.travel(timedelta(seconds=30))
    assert run_clock().fired == 1
    assert [t.due_at for t in ticks()] == [NINE + timedelta(minutes=5)]
    assert audit_trail() == [
        ("schedule_create", "olga", "created"),
        ("schedule_pause", "olga", "paused"),
        ("schedule_pause", "olga", "already_paused"),
        ("schedule_resume", "olga", "resumed"),
        ("schedule_resume", "olga", "not_paused"),
    ]


def test_trigger_now_runs_the_action_at_once_even_when_paused(car: Car) -> None:
    testing.freeze(MONDAY)
    honking(car)
    schedules.pause("honker", by="olga")

    tick = schedules.trigger("honker", by="olga", reason="a customer asked")

    assert tick.manual and tick.outcome == schedules.FIRED and tick.by == "olga"
    testing.drain()
    assert [a.status for a in actions_started()] == ["succeeded"]
    with engine.new_session() as s:
        event = s.scalar(select(ActionEvent).where(ActionEvent.event == "scheduled"))
        assert event is not None and event.by == "olga" and event.cause == "operator"
        assert event.invocation_id == tick.invocation_id
        entry = s.scalars(select(AuditEntry).where(AuditEntry.command == "schedule_trigger")).one()
        assert entry.reason == "a customer asked"
        assert entry.data["invocation_id"] == tick.invocation_id


def test_trigger_now_ignores_the_overlap_policy(car: Car) -> None:
    testing.freeze(MONDAY)
    honking(car, overlap="skip")
    engine.define(Car, "honk", lambda car: None, outbound=True)
    schedules.trigger("honker", by="olga")
    testing.drain()
    testing.travel(timedelta(microseconds=1))
    schedules.trigger("honker", by="olga")
    assert [t.manual for t in ticks()] == [True, True]


def test_a_manual_run_and_a_scheduled_tick_at_the_same_instant_both_run(car: Car) -> None:
    testing.freeze(NINE - timedelta(seconds=30))
    honking(car, overlap="allow")
    testing.travel(timedelta(seconds=30))  # exactly 09:00
    schedules.trigger("honker", by="olga")
    assert run_clock().fired == 1
    assert sorted(t.manual for t in ticks()) == [False, True]


def test_deleting_a_schedule_stops_it_and_keeps_its_actions(car: Car) -> None:
    testing.freeze(MONDAY)
    honking(car)
    testing.travel(timedelta(seconds=30))
    run_clock()

    schedules.delete("honker", by="olga", reason="not needed")

    with engine.new_session() as s:
        assert s.scalars(select(Schedule)).all() == []
        entry = s.scalars(select(AuditEntry).where(AuditEntry.command == "schedule_delete")).one()
        assert entry.data["cron"] == "* * * * *" and entry.data["action"] == "honk"
    assert len(actions_started()) == 1
    testing.travel(timedelta(minutes=1))
    assert run_clock().fired == 0


def test_commands_on_an_unknown_schedule_name_it(car: Car) -> None:
    for command in (schedules.pause, schedules.resume, schedules.trigger, schedules.delete):
        with pytest.raises(schedules.ScheduleError, match="no schedule named 'nope'") as raised:
            command("nope", by="olga")
        assert raised.value.field == "name"
