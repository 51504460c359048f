"""Helpers of the schedules' tests: a car that honks on a schedule, and its ticks."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select

import engine
from engine import schedules, testing
from engine.models import Action, Invocation, Schedule, Tick
from tests.domain import Car

#: A Monday, 30 seconds before nine (UTC).
MONDAY = datetime(2026, 1, 5, 8, 59, 30)


def honking(car: Car, name: str = "honker", **options: Any) -> Schedule:
    """An operator's schedule that honks ``car`` (every minute unless told otherwise)."""
    engine.define(Car, "honk", lambda car: car.honk())
    if "every" not in options:
        options.setdefault("cron", "* * * * *")
    return schedules.create(name, actor_type="Car", actor_id=str(car.id), action="honk", by="olga", **options)


def ticks(name: str = "honker") -> list[Tick]:
    with engine.new_session() as session:
        schedule = session.scalar(select(Schedule).where(Schedule.name == name))
        assert schedule is not None
        return list(session.scalars(select(Tick).where(Tick.schedule_id == schedule.id).order_by(Tick.id)))


def schedule_row(name: str = "honker") -> Schedule:
    with engine.new_session() as session:
        found = session.scalar(select(Schedule).where(Schedule.name == name))
        assert found is not None
        return found


def actions_started(name: str = "honk") -> list[Action]:
    with engine.new_session() as session:
        return list(session.scalars(select(Action).where(Action.name == name).order_by(Action.id)))


def invocations(name: str = "honk") -> list[Invocation]:
    with engine.new_session() as session:
        return list(
            session.scalars(select(Invocation).where(Invocation.name == name).order_by(Invocation.id))
        )


def run_clock() -> schedules.TickReport:
    """One round of the clock, then the workers' drain."""
    report = schedules.tick()
    testing.drain()
    return report
