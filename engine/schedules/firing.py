"""Firing: the clock's tick (every due schedule fires its tick once) and "trigger now".

A tick is one indexed query for the due schedules (``next_fire_at <= now``, active only);
each due schedule then fires in a transaction of its own, under its row lock, with the
tick's unique row inserted before the action is invoked (the exactly-once guarantee, see
engine/schedules/tables.py). The invocation is the engine's ordinary one: recorded in that
transaction, admitted by a worker after commit (the row is the outbox; the sweeper resends).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial

from sqlalchemy import select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from .. import broker, clock, counter, db, history, status
from ..action import Action
from ..invocation import Invocation
from .tables import FIRED, MISSED, RUN_ONCE, SKIP, SKIPPED, Schedule, Tick

log = logging.getLogger("stepwise")

#: The cause in the history of what a schedule started.
SCHEDULE = "schedule"
#: A tick handled later than this after it was due counts as missed (the clock was down):
#: the schedule's ``missed`` policy decides whether it still runs.
MISSED_AFTER = timedelta(seconds=60)
FIRED_TOTAL = "stepwise_schedule_ticks_fired_total"
SKIPPED_TOTAL = "stepwise_schedule_ticks_skipped_total"


@dataclass
class TickReport:
    fired: int = 0
    skipped: int = 0
    missed: int = 0
    #: When the next active schedule not yet due is due, if the tick saw it (the clock sleeps
    #: until then at most); None when it did not look that far.
    next_at: datetime | None = None

    def __str__(self) -> str:
        return f"schedules: {self.fired} fired, {self.skipped} skipped (overlap), {self.missed} missed"


def tick(session: Session | None = None, *, limit: int = 100) -> TickReport:
    """Fire every due schedule's tick, once; the clock process calls it every second or so.

    One query when nothing is due: the active schedules soonest first, through the partial
    index ix_stepwise_schedules_due, up to ``limit`` due ones and the first one not due."""
    own = session is None
    s = session if session is not None else db.session()
    report = TickReport()
    try:
        now = clock.now()
        soonest = s.execute(
            select(Schedule.id, Schedule.next_fire_at)
            .where(Schedule.paused_at.is_(None), Schedule.next_fire_at.is_not(None))
            .order_by(Schedule.next_fire_at)
            .limit(limit + 1)
        ).all()
        s.rollback()  # the read's snapshot: each schedule fires in a transaction of its own
        due = [schedule_id for schedule_id, at in soonest if at is not None and at <= now][:limit]
        later = [at for _, at in soonest if at is not None and at > now]
        report.next_at = later[0] if later else None
        for schedule_id in due:
            try:
                outcome = db.retrying(s, partial(_fire_due, s, schedule_id))
            except Exception:  # one broken schedule leaves the others firing
                log.exception("stepwise: schedule %s could not fire", schedule_id)
                continue
            if outcome is not None:
                setattr(report, outcome, getattr(report, outcome) + 1)
        if due:  # their next ticks moved on: the clock looks again soon
            report.next_at = None
        return report
    finally:
        if own:
            s.close()


def soonest(session: Session) -> datetime | None:
    """When the next active schedule is due."""
    return session.scalar(
        select(Schedule.next_fire_at)
        .where(Schedule.paused_at.is_(None), Schedule.next_fire_at.is_not(None))
        .order_by(Schedule.next_fire_at)
        .limit(1)
    )


def _fire_due(s: Session, schedule_id: int) -> str | None:
    now = clock.now()
    # Another clock holding this schedule is firing it: skip it (it moves next_fire_at on).
    schedule = s.scalars(
        select(Schedule)
        .where(Schedule.id == schedule_id, Schedule.paused_at.is_(None), Schedule.next_fire_at <= now)
        .with_for_update(skip_locked=True)
        .execution_options(populate_existing=True)
    ).one_or_none()
    if schedule is None or schedule.next_fire_at is None:
        return None
    rule = schedule.rule
    count, latest = rule.due(schedule.next_fire_at, now)
    schedule.next_fire_at = rule.after(now)
    late = now - latest > MISSED_AFTER
    name = "fired"
    if late and schedule.missed == SKIP:
        note = f"{count} tick{'s' if count > 1 else ''} missed while no clock ran (missed: skip)"
        if _insert_tick(s, schedule, latest, now, MISSED, missed_count=count, note=note) is not None:
            counter.count(s, {SKIPPED_TOTAL: count}, {"reason": MISSED})
        name = "missed"
    else:
        # The ticks before the latest did not run (counted once the tick's row is won).
        earlier_missed = {SKIPPED_TOTAL: count - 1}
        running = _previous_run_going(s, schedule) if schedule.overlap == SKIP else None
        if running is not None:
            note = f"action {running[0]} of the previous run is still {running[1]} (overlap: skip)"
            if _insert_tick(s, schedule, latest, now, SKIPPED, missed_count=count - 1, note=note) is not None:
                counter.count(s, {SKIPPED_TOTAL: 1}, {"reason": SKIPPED})
                counter.count(s, earlier_missed, {"reason": MISSED})
            name = "skipped"
        else:
            note = None
            if late:
                note = f"catch-up run for {count} missed tick{'s' if count > 1 else ''} (missed: run_once)"
            elif count > 1:
                note = f"{count - 1} earlier tick{'s' if count > 2 else ''} missed"
            assert late is False or schedule.missed == RUN_ONCE
            tick_id = _insert_tick(s, schedule, latest, now, FIRED, missed_count=count - 1, note=note)
            if tick_id is None:
                return None  # another clock fired this tick
            invoke(s, schedule, tick_id, latest, by=None)
            counter.count(s, {FIRED_TOTAL: 1})
            counter.count(s, earlier_missed, {"reason": MISSED})
    return name


def trigger(s: Session, schedule: Schedule, *, by: str | None) -> Tick | None:
    """A manual run now, whatever the overlap policy (an operator asked); recorded as a
    tick of its own. None when one was triggered at this very instant already."""
    now = clock.now()
    tick_id = _insert_tick(s, schedule, now, now, FIRED, manual=True, by=by, note="triggered by hand")
    if tick_id is None:
        return None
    invoke(s, schedule, tick_id, now, by=by)
    counter.count(s, {FIRED_TOTAL: 1})
    return s.get(Tick, tick_id)


def invoke(s: Session, schedule: Schedule, tick_id: int, due_at: datetime, *, by: str | None) -> Invocation:
    """Record the schedule's invocation (the engine's outbox row) and link it to its tick.
    Built from the stored references: the clock needs none of the actors' modules; a gone
    actor or action fails its admission visibly, as any invocation's would."""
    invocation = Invocation(
        kind="action",
        actor_type=schedule.actor_type,
        actor_id=schedule.actor_id,
        name=schedule.action,
        arguments_json=list(schedule.arguments or []),
        created_at=clock.now(),
    )
    s.add(invocation)
    s.flush()
    s.execute(update(Tick).where(Tick.id == tick_id).values(invocation_id=invocation.id))
    broker.enqueue(s, broker.ADMIT, invocation.id)
    history.record(
        s,
        None,
        "scheduled",
        cause=SCHEDULE if by is None else history.OPERATOR,
        by=by or schedule.name,
        invocation_id=invocation.id,
        schedule=schedule.name,
        due_at=due_at.isoformat(),
        manual=by is not None,
    )
    return invocation


def _insert_tick(
    s: Session,
    schedule: Schedule,
    due_at: datetime,
    now: datetime,
    outcome: str,
    *,
    manual: bool = False,
    missed_count: int = 0,
    by: str | None = None,
    note: str | None = None,
) -> int | None:
    """The tick's row, or None when it exists already (another clock won it)."""
    insert = postgresql.insert if s.get_bind().dialect.name == "postgresql" else sqlite.insert
    statement = (
        insert(Tick)
        .values(
            schedule_id=schedule.id,
            due_at=due_at,
            manual=manual,
            fired_at=now,
            outcome=outcome,
            lag_seconds=round(max((now - due_at).total_seconds(), 0.0), 6),
            missed_count=missed_count,
            by=by,
            note=note,
        )
        .on_conflict_do_nothing(index_elements=["schedule_id", "due_at", "manual"])
        .returning(Tick.id)
    )
    return s.scalar(statement)


def _previous_run_going(s: Session, schedule: Schedule) -> tuple[int | str, str] | None:
    """(action id, status) of the schedule's last run if it is still pending or performing
    (or not even admitted yet: then the invocation's id), else None."""
    row = s.execute(
        select(Invocation.id, Invocation.settled_at, Action.id, Action.status)
        .select_from(Tick)
        .join(Invocation, Invocation.id == Tick.invocation_id)
        .outerjoin(Action, Action.id == Invocation.action_id)
        .where(Tick.schedule_id == schedule.id, Tick.invocation_id.is_not(None))
        .order_by(Tick.id.desc())
        .limit(1)
    ).one_or_none()
    if row is None:
        return None
    invocation_id, settled_at, action_id, state = row
    if settled_at is None:
        return f"(invocation {invocation_id})", "waiting for admission"
    if action_id is not None and state in status.UNFINISHED:
        return action_id, state
    return None
