"""Schedules declared in code: ``engine.schedule(...)`` at import time, upserted by name
into ``stepwise_schedules`` by ``sync()`` (the clock calls it when it starts).

A sync changes what the code says (rule, time zone, actor, action, arguments, policies)
and keeps what operators decide: a paused schedule stays paused. It never deletes: a
schedule no longer declared stays, listed as declared in code, until an operator deletes
it (a process that imported fewer modules must not remove another's schedules).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from .. import arguments, audit, clock, db, history, registry
from ..errors import ArgumentError, NotAnActor
from .manage import check_name, check_policies, describe
from .rule import Rule, ScheduleError
from .tables import CODE, SKIP, Schedule


@dataclass(frozen=True)
class Declared:
    name: str
    rule: Rule
    actor_type: str
    actor_id: str
    action: str
    arguments: list[Any]
    missed: str
    overlap: str


_declared: dict[str, Declared] = {}


def schedule(
    name: str,
    *,
    actor: Any,
    action: str,
    cron: str | None = None,
    every: timedelta | float | None = None,
    timezone: str | None = None,
    args: Sequence[Any] = (),
    missed: str = SKIP,
    overlap: str = SKIP,
) -> Declared:
    """Declare a schedule: ``cron`` (in ``timezone``, default UTC) or ``every`` starts
    ``action`` on ``actor`` (a registered service object, a persisted row, or an
    ``(actor_type, actor_id)`` pair) with ``args``. ``missed``: after downtime, "skip" the
    missed ticks or "run_once" for them all; ``overlap``: "skip" a tick while the previous
    run is still going, or "allow" it. Declaring a name again replaces it."""
    name = check_name(name)
    rule = Rule.of(cron, every, timezone)
    check_policies(missed, overlap)
    if isinstance(actor, tuple):
        actor_type, actor_id = str(actor[0]), str(actor[1])
        cls = registry.actor_classes().get(actor_type)
    else:
        try:
            actor_type, actor_id = registry.actor_ref(actor)
        except NotAnActor as error:
            raise ScheduleError("actor", str(error)) from None
        cls = type(actor)
    if cls is not None and not callable(getattr(cls, action, None)) and registry.find(cls, action) is None:
        raise ScheduleError("action", f"{actor_type} has no action {action!r}")
    try:
        stored = arguments.dump(list(args))
    except ArgumentError as error:
        raise ScheduleError("arguments", str(error)) from None
    declared = Declared(name, rule, actor_type, actor_id, action, stored, missed, overlap)
    _declared[name] = declared
    return declared


def declared() -> list[Declared]:
    return list(_declared.values())


def forget_declared(name: str | None = None) -> None:
    """Drop one declaration (or all): tests declare freely."""
    if name is None:
        _declared.clear()
    else:
        _declared.pop(name, None)


@dataclass
class SyncReport:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return (
            f"schedules declared in code: {len(self.created)} created, {len(self.updated)} updated, "
            f"{len(self.unchanged)} unchanged"
        )


def sync(session: Session | None = None) -> SyncReport:
    """Upsert every schedule declared in this process, by name, in one transaction."""
    own = session is None
    s = session if session is not None else db.session()
    try:
        for attempt in range(3):
            try:
                return db.retrying(s, lambda: _sync(s))
            except IntegrityError:
                # Another clock starting at the same time created the same schedule first:
                # this attempt was rolled back; the next one finds the row and updates it.
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")
    finally:
        if own:
            s.close()


def _sync(s: Session) -> SyncReport:
    report = SyncReport()
    wanted = declared()
    if not wanted:
        return report
    now = clock.now()
    existing = {
        row.name: row
        for row in s.scalars(
            select(Schedule).where(Schedule.name.in_([d.name for d in wanted])).with_for_update()
        )
    }
    for d in wanted:
        values = {
            "cron": d.rule.cron,
            "every_seconds": int(d.rule.every.total_seconds()) if d.rule.every is not None else None,
            "timezone": d.rule.timezone,
            "actor_type": d.actor_type,
            "actor_id": d.actor_id,
            "action": d.action,
            "arguments": d.arguments,
            "missed": d.missed,
            "overlap": d.overlap,
            "source": CODE,
        }
        row = existing.get(d.name)
        if row is None:
            row = Schedule(name=d.name, next_fire_at=d.rule.after(now), **values)
            s.add(row)
            report.created.append(d.name)
        elif any(getattr(row, key) != value for key, value in values.items()):
            timing = (row.cron, row.every_seconds, row.timezone) != (
                values["cron"],
                values["every_seconds"],
                values["timezone"],
            )
            for key, value in values.items():
                setattr(row, key, value)
            if timing or row.next_fire_at is None:
                row.next_fire_at = d.rule.after(now)
            report.updated.append(d.name)
        else:
            report.unchanged.append(d.name)
            continue
        s.flush()
        audit.record(
            s,
            "schedule_sync",
            f"schedule:{d.name}",
            cause=history.CALLER,
            by="code",
            result="created" if d.name in report.created else "updated",
            **describe(row),
        )
    return report
