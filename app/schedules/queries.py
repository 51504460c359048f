"""Read model of the Schedules page: each schedule with its next ticks (in UTC and in its
own time zone) and its last runs, each with the action it started and that action's status;
and, for an action's page, the schedule tick that started it (``started_by``).

Two queries whatever the number of schedules: the schedules (at most ``LIMIT``), then their
last runs (for each schedule the newest few entries of ix_stepwise_schedule_ticks_schedule,
however many ticks it has, joined to the invocations and actions).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select, union_all
from sqlalchemy.orm import Session

from engine import clock
from engine.models import Action, Invocation, Schedule, Tick
from engine.schedules.rule import zone

#: Runs shown per schedule on the list; its own page shows more.
LIST_RUNS = 5
PAGE_RUNS = 50
#: Schedules listed at most (by name).
LIMIT = 500


@dataclass(frozen=True)
class Run:
    tick: Tick
    action_id: int | None
    status: str | None


@dataclass(frozen=True)
class Upcoming:
    utc: datetime
    local: str


@dataclass
class Row:
    schedule: Schedule
    words: str
    upcoming: list[Upcoming]
    runs: list[Run] = field(default_factory=list)

    @property
    def interval(self) -> str | None:
        s = self.schedule.every_seconds
        return None if s is None else f"every {s} s"


def local(instant: datetime, timezone: str) -> str:
    shown = instant.replace(tzinfo=UTC).astimezone(zone(timezone))
    return f"{shown:%Y-%m-%d %H:%M:%S} {shown.tzname()}"


def row_of(schedule: Schedule, now: datetime) -> Row:
    rule = schedule.rule
    upcoming = [] if schedule.paused else rule.upcoming(now, 3)
    return Row(schedule, rule.describe(), [Upcoming(t, local(t, schedule.timezone)) for t in upcoming])


def rows(session: Session, runs: int = LIST_RUNS) -> list[Row]:
    now = clock.now()
    found = [row_of(s, now) for s in session.scalars(select(Schedule).order_by(Schedule.name).limit(LIMIT))]
    by_id = {row.schedule.id: row for row in found}
    if not by_id:
        return found
    for run in last_runs(session, list(by_id), runs):
        by_id[run.tick.schedule_id].runs.append(run)
    return found


def one(session: Session, schedule_id: int, runs: int = PAGE_RUNS) -> Row | None:
    schedule = session.get(Schedule, schedule_id)
    if schedule is None:
        return None
    row = row_of(schedule, clock.now())
    row.runs = last_runs(session, [schedule_id], runs)
    return row


def last_runs(session: Session, schedule_ids: list[int], per_schedule: int) -> list[Run]:
    """The last ``per_schedule`` ticks of each schedule, newest first, with their actions."""
    newest = [
        select(Tick.id)
        .where(Tick.schedule_id == schedule_id)
        .order_by(Tick.id.desc())
        .limit(per_schedule)
        .subquery()
        for schedule_id in schedule_ids
    ]
    ids = union_all(*[select(part.c.id) for part in newest])
    query: Any = (
        select(Tick, Action.id, Action.status)
        .outerjoin(Invocation, Invocation.id == Tick.invocation_id)
        .outerjoin(Action, Action.id == Invocation.action_id)
        .where(Tick.id.in_(ids))
        .order_by(Tick.schedule_id, Tick.id.desc())
    )
    return [Run(tick, action_id, state) for tick, action_id, state in session.execute(query)]


@dataclass(frozen=True)
class StartedBy:
    """The schedule tick that started an action: the action page's provenance line, and the
    API's ``started_by``."""

    schedule_id: int
    schedule: str
    timezone: str
    due_at: datetime
    manual: bool
    by: str | None
    tick_id: int

    @property
    def local(self) -> str:
        return local(self.due_at, self.timezone)


def started_by(session: Session, action_id: int) -> StartedBy | None:
    """The newest tick whose invocation became ``action_id``, if a schedule started it: one
    query, by ix_stepwise_invocations_action then ix_stepwise_schedule_ticks_invocation."""
    found = session.execute(
        select(Schedule.id, Schedule.name, Schedule.timezone, Tick.due_at, Tick.manual, Tick.by, Tick.id)
        .select_from(Invocation)
        .join(Tick, Tick.invocation_id == Invocation.id)
        .join(Schedule, Schedule.id == Tick.schedule_id)
        .where(Invocation.action_id == action_id)
        .order_by(Tick.id.desc())
        .limit(1)
    ).first()
    return StartedBy(*found) if found is not None else None
