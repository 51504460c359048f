"""Operators' commands on schedules (the studio's forms, the JSON API, ``stepwise schedules``):
create, edit, pause, resume, trigger now, delete. Each runs in one transaction and is audited
with who and why; "trigger now" also lands in the history of what it starts.

A schedule declared in code (``engine.schedule``) is the code's to change: ``edit`` refuses
it (``DeclaredInCode``), because the next sync would put the code's rule back; operators
still pause, resume, trigger and delete it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from enum import Enum
from typing import Any, Literal

from sqlalchemy import delete as sql_delete
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session

from .. import arguments, audit, clock, db, history, registry
from ..errors import ActorNotFound, ArgumentError
from .firing import trigger as fire_now
from .rule import Rule, ScheduleError
from .tables import CODE, MISSED_POLICIES, OPERATOR, OVERLAP_POLICIES, SKIP, Schedule, Tick

#: The longest schedule name (the column's width).
MAX_NAME = 200


def find(session: Session, name: str) -> Schedule | None:
    return session.scalar(select(Schedule).where(Schedule.name == name))


def _existing(session: Session, name: str, *, lock: bool = True) -> Schedule:
    query = select(Schedule).where(Schedule.name == name)
    if lock:
        query = query.with_for_update().execution_options(populate_existing=True)
    found = session.scalar(query)
    if found is None:
        raise NoSuchSchedule(name)
    return found


class NoSuchSchedule(ScheduleError):
    """Raised when a command names a schedule that does not exist (or was deleted meanwhile)."""

    def __init__(self, name: str) -> None:
        super().__init__("name", f"there is no schedule named {name[:200]!r} (see `stepwise schedules list`)")


def check_policies(missed: str, overlap: str) -> None:
    if missed not in MISSED_POLICIES:
        raise ScheduleError("missed", f"missed is {missed[:40]!r}: use one of {', '.join(MISSED_POLICIES)}")
    if overlap not in OVERLAP_POLICIES:
        raise ScheduleError(
            "overlap", f"overlap is {overlap[:40]!r}: use one of {', '.join(OVERLAP_POLICIES)}"
        )


def check_name(name: str) -> str:
    name = (name or "").strip()
    if not name:
        raise ScheduleError("name", "a schedule needs a name, like 'nightly-report'")
    if len(name) > MAX_NAME or "\x00" in name or not name.isprintable():
        raise ScheduleError("name", f"a schedule's name is at most {MAX_NAME} printable characters")
    return name


def check_target(session: Session, actor_type: str, actor_id: str, action: str) -> None:
    """The actor type is registered here, has the action, and the actor exists."""
    cls = registry.actor_classes().get(actor_type)
    if cls is None:
        known = ", ".join(sorted(registry.actor_classes())) or "none"
        raise ScheduleError(
            "actor_type",
            f"there is no actor type {actor_type[:80]!r} in this process (it knows: {known}); "
            "import the module that defines it (--import MODULE)",
        )
    if not action or action.startswith("_") or registry.find(cls, action) is None:
        known = ", ".join(sorted(d.name for d in registry.definitions() if issubclass(cls, d.actor_class)))
        raise ScheduleError(
            "action",
            f"{actor_type} has no registered action {action[:80]!r} (its actions: {known or 'none'})",
        )
    if not actor_id:
        raise ScheduleError(
            "actor_id", f"say which {actor_type} the schedule starts {action} on: the id is empty"
        )
    try:
        registry.load_actor(session, actor_type, actor_id)
    except (ActorNotFound, SQLAlchemyError):
        session.rollback()
        raise ScheduleError("actor_id", f"there is no {actor_type} with id {actor_id[:80]!r}") from None


def create(
    name: str,
    *,
    actor_type: str,
    actor_id: str,
    action: str,
    args: list[Any] | None = None,
    cron: str | None = None,
    every: timedelta | float | None = None,
    timezone: str | None = None,
    missed: str = SKIP,
    overlap: str = SKIP,
    by: str | None = None,
    reason: str | None = None,
) -> Schedule:
    """A new schedule made by an operator; a ScheduleError names the field that is wrong."""
    name = check_name(name)
    rule = Rule.of(cron, every, timezone)
    check_policies(missed, overlap)
    try:
        stored = arguments.dump(list(args or []))
    except ArgumentError as error:
        raise ScheduleError("arguments", str(error)) from None
    with db.session() as session:
        check_target(session, actor_type, actor_id, action)

        def work() -> Schedule:
            if find(session, name) is not None:
                raise ScheduleError("name", f"a schedule named {name!r} exists already: pick another name")
            schedule = Schedule(
                name=name,
                cron=rule.cron,
                every_seconds=int(rule.every.total_seconds()) if rule.every is not None else None,
                timezone=rule.timezone,
                actor_type=actor_type,
                actor_id=actor_id,
                action=action,
                arguments=stored,
                missed=missed,
                overlap=overlap,
                source=OPERATOR,
                next_fire_at=rule.after(clock.now()),
            )
            session.add(schedule)
            session.flush()
            audit.record(
                session,
                "schedule_create",
                f"schedule:{name}",
                cause=history.OPERATOR,
                by=by,
                reason=reason,
                result="created",
                **describe(schedule),
            )
            return schedule

        try:
            return db.retrying(session, work)
        except IntegrityError:  # the same name created meanwhile, by another operator
            raise ScheduleError(
                "name", f"a schedule named {name!r} exists already: pick another name"
            ) from None


class Unset(Enum):
    """A keyword not given: ``edit`` leaves that part of the schedule as it is."""

    UNSET = "unset"


UNSET = Unset.UNSET


class DeclaredInCode(ScheduleError):
    """Raised when an operator edits a schedule declared in code: the next sync would undo
    the edit, so the code is where it changes."""

    def __init__(self, name: str) -> None:
        super().__init__(
            "name",
            f"the schedule {name[:200]!r} is declared in code (engine.schedule): change it there and "
            "deploy, since the next sync would put the code's version back; pause, resume, trigger "
            "or delete it here",
        )


@dataclass(frozen=True)
class Edited:
    """What ``edit`` did: the schedule as it is now and each field it changed, ``{field:
    (before, after)}``; empty when the edit asked for what the schedule already was."""

    schedule: Schedule
    changes: dict[str, tuple[Any, Any]]

    @property
    def changed(self) -> bool:
        return bool(self.changes)


def edit(
    name: str,
    *,
    cron: str | Literal[Unset.UNSET] | None = UNSET,
    every: timedelta | float | Literal[Unset.UNSET] | None = UNSET,
    timezone: str | None = None,
    args: list[Any] | None = None,
    missed: str | None = None,
    overlap: str | None = None,
    by: str | None = None,
    reason: str | None = None,
) -> Edited:
    """Change a schedule in place: its rule (give ``cron`` or ``every``: the one given
    replaces the other), time zone, arguments, missed-tick or overlap policy; what is not
    given stays. A new rule or time zone recomputes the next tick from now, so an edit never
    runs a tick that was due before it. Audited with the fields before and after; a
    ScheduleError names the field that is wrong (``DeclaredInCode`` for engine.schedule's)."""
    with db.session() as session:

        def work() -> Edited:
            schedule = _existing(session, name)
            if schedule.source == CODE:
                raise DeclaredInCode(schedule.name)
            rule = schedule.rule
            if cron is not UNSET or every is not UNSET:
                rule = Rule.of(
                    None if cron is UNSET else cron,
                    None if every is UNSET else every,
                    timezone or rule.timezone,
                )
            elif timezone is not None:
                rule = Rule.of(rule.cron, rule.every, timezone)
            new_missed = schedule.missed if missed is None else missed
            new_overlap = schedule.overlap if overlap is None else overlap
            check_policies(new_missed, new_overlap)
            stored = schedule.arguments
            if args is not None:
                try:
                    stored = arguments.dump(list(args))
                except ArgumentError as error:
                    raise ScheduleError("arguments", str(error)) from None
            before = describe(schedule)
            wanted = {
                "cron": rule.cron,
                "every_seconds": int(rule.every.total_seconds()) if rule.every is not None else None,
                "timezone": rule.timezone,
                "arguments": stored,
                "missed": new_missed,
                "overlap": new_overlap,
            }
            changes = {key: (before[key], value) for key, value in wanted.items() if before[key] != value}
            if not changes:
                audit.record(
                    session,
                    "schedule_edit",
                    f"schedule:{schedule.name}",
                    cause=history.OPERATOR,
                    by=by,
                    reason=reason,
                    result="unchanged",
                )
                return Edited(schedule, {})
            for key, value in wanted.items():
                setattr(schedule, key, value)
            if {"cron", "every_seconds", "timezone"} & set(changes):
                # From now: the ticks of the old rule that were due are not run (no back-fire).
                schedule.next_fire_at = rule.after(clock.now())
            session.flush()
            audit.record(
                session,
                "schedule_edit",
                f"schedule:{schedule.name}",
                cause=history.OPERATOR,
                by=by,
                reason=reason,
                result="edited",
                before={key: change[0] for key, change in changes.items()},
                after={key: change[1] for key, change in changes.items()},
                next_fire_at=schedule.next_fire_at.isoformat() if schedule.next_fire_at else None,
            )
            return Edited(schedule, changes)

        return db.retrying(session, work)


def describe(schedule: Schedule) -> dict[str, Any]:
    """The schedule as the audit keeps it (enough to make it again)."""
    return {
        "cron": schedule.cron,
        "every_seconds": schedule.every_seconds,
        "timezone": schedule.timezone,
        "actor": f"{schedule.actor_type}/{schedule.actor_id}",
        "action": schedule.action,
        "arguments": schedule.arguments,
        "missed": schedule.missed,
        "overlap": schedule.overlap,
    }


def _command(name: str, verb: str, by: str | None, reason: str | None, change: Any) -> Any:
    with db.session() as session:

        def work() -> Any:
            schedule = _existing(session, name)
            result, value, data = change(session, schedule)
            audit.record(
                session,
                f"schedule_{verb}",
                f"schedule:{name}",
                cause=history.OPERATOR,
                by=by,
                reason=reason,
                result=result,
                **data,
            )
            return value

        return db.retrying(session, work)


def pause(name: str, *, by: str | None = None, reason: str | None = None) -> bool:
    """Stop the schedule's ticks; False when it was paused already."""

    def change(session: Session, schedule: Schedule) -> tuple[str, bool, dict[str, Any]]:
        if schedule.paused_at is not None:
            return "already_paused", False, {}
        schedule.paused_at, schedule.paused_by = clock.now(), by
        return "paused", True, {}

    return bool(_command(name, "pause", by, reason, change))


def resume(name: str, *, by: str | None = None, reason: str | None = None) -> bool:
    """Start ticking again from now: the ticks due while paused are not run (no back-fire);
    False when it was not paused."""

    def change(session: Session, schedule: Schedule) -> tuple[str, bool, dict[str, Any]]:
        if schedule.paused_at is None:
            return "not_paused", False, {}
        schedule.paused_at, schedule.paused_by = None, None
        schedule.next_fire_at = schedule.rule.after(clock.now())
        next_at = schedule.next_fire_at.isoformat() if schedule.next_fire_at else None
        return "resumed", True, {"next_fire_at": next_at}

    return bool(_command(name, "resume", by, reason, change))


def trigger(name: str, *, by: str | None = None, reason: str | None = None) -> Tick:
    """Run the schedule's action now (a manual run, recorded as a tick, audited), whatever
    its overlap policy and even when paused."""

    def change(session: Session, schedule: Schedule) -> tuple[str, Tick, dict[str, Any]]:
        tick = fire_now(session, schedule, by=by)
        if tick is None:
            raise ScheduleError("name", f"{name!r} was triggered at this very instant already")
        return "triggered", tick, {"invocation_id": tick.invocation_id}

    tick: Tick = _command(name, "trigger", by, reason, change)
    return tick


def delete(name: str, *, by: str | None = None, reason: str | None = None) -> None:
    """Remove the schedule and its ticks (the actions it started stay; the audit keeps what
    it was). A schedule declared in code comes back at the next sync unless removed there."""

    def change(session: Session, schedule: Schedule) -> tuple[str, None, dict[str, Any]]:
        session.execute(sql_delete(Tick).where(Tick.schedule_id == schedule.id))
        kept = describe(schedule)
        session.delete(schedule)
        return "deleted", None, kept

    _command(name, "delete", by, reason, change)
