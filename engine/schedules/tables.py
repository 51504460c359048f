"""Schedules and their ticks: the rule that starts an action on an actor, and one row per
(schedule, tick time) that makes each tick fire exactly once.

Exactly once, whatever the number of clock processes: the clock locks a due schedule's row
(``FOR UPDATE SKIP LOCKED`` on PostgreSQL, SQLite's single writer), and the unique
``uq_stepwise_schedule_ticks_due`` backs it: the tick's row is inserted before the action
is invoked, in the same transaction, and an insert that finds its tick already there
invokes nothing.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import JSON, BigInteger, Float, ForeignKey, Index, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from ..db import Base, Id, Timestamps, partial_index
from .rule import Rule

# Policies, as stored.
SKIP = "skip"
RUN_ONCE = "run_once"
ALLOW = "allow"
MISSED_POLICIES = (SKIP, RUN_ONCE)
OVERLAP_POLICIES = (SKIP, ALLOW)
# Where a schedule was declared.
CODE = "code"
OPERATOR = "operator"
# What became of a tick.
FIRED = "fired"
SKIPPED = "skipped"  # the previous run was still going (overlap "skip")
MISSED = "missed"  # due while no clock ran (missed "skip")


class Schedule(Timestamps, Base):
    __tablename__ = "stepwise_schedules"
    __table_args__ = (
        Index("uq_stepwise_schedules_name", "name", unique=True),
        # The clock's one query: the active schedules due now, soonest first.
        partial_index(
            "ix_stepwise_schedules_due",
            "next_fire_at",
            where="paused_at IS NULL",
        ),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    #: A cron expression, read in ``timezone``; or NULL for an interval.
    cron: Mapped[str | None] = mapped_column(String(200))
    #: An interval in seconds, aligned to the Unix epoch; or NULL for a cron expression.
    every_seconds: Mapped[int | None] = mapped_column(BigInteger)
    timezone: Mapped[str] = mapped_column(String(64), default="UTC")
    actor_type: Mapped[str] = mapped_column(String(255))
    actor_id: Mapped[str] = mapped_column(String(255))
    action: Mapped[str] = mapped_column(String(255))
    #: The action's arguments in engine.arguments' JSON form.
    arguments: Mapped[list[Any]] = mapped_column(JSON, default=list)
    #: After downtime: "skip" the missed ticks, or "run_once" for all of them.
    missed: Mapped[str] = mapped_column(String(10), default=SKIP)
    #: When the previous run is still going: "skip" the tick, or "allow" a second run.
    overlap: Mapped[str] = mapped_column(String(10), default=SKIP)
    #: "code" (engine.schedule, upserted by sync) or "operator" (studio, CLI).
    source: Mapped[str] = mapped_column(String(10), default=OPERATOR)
    paused_at: Mapped[datetime | None]
    paused_by: Mapped[str | None] = mapped_column(String(255))
    #: The next tick (naive UTC); resuming recomputes it from the time of resuming.
    next_fire_at: Mapped[datetime | None]

    @property
    def rule(self) -> Rule:
        every = timedelta(seconds=self.every_seconds) if self.every_seconds is not None else None
        return Rule(self.cron, every, self.timezone)

    @property
    def paused(self) -> bool:
        return self.paused_at is not None

    def __repr__(self) -> str:
        return f"<Schedule {self.id} {self.name!r} next={self.next_fire_at}>"


class Tick(Base):
    __tablename__ = "stepwise_schedule_ticks"
    __table_args__ = (
        # Each tick of a schedule once (an operator's "trigger now" is a tick of its own).
        UniqueConstraint("schedule_id", "due_at", "manual", name="uq_stepwise_schedule_ticks_due"),
        # A schedule's last runs, newest first (the studio; the overlap check).
        Index("ix_stepwise_schedule_ticks_schedule", "schedule_id", "id"),
        # The lag histogram: the ticks fired in the last hour.
        Index("ix_stepwise_schedule_ticks_fired_at", "fired_at"),
        # An action's page: the tick that started it, if a schedule did (by its invocation).
        Index("ix_stepwise_schedule_ticks_invocation", "invocation_id"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    schedule_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("stepwise_schedules.id"))
    #: When the tick was due (for a manual run: when it was asked for).
    due_at: Mapped[datetime]
    manual: Mapped[bool] = mapped_column(default=False)
    #: When a clock handled it (fired, skipped or recorded it missed).
    fired_at: Mapped[datetime]
    #: fired, skipped (overlap) or missed.
    outcome: Mapped[str] = mapped_column(String(10))
    invocation_id: Mapped[int | None] = mapped_column(BigInteger, ForeignKey("stepwise_invocations.id"))
    #: Seconds between due_at and fired_at.
    lag_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    #: Earlier ticks that did not run and this row stands for (downtime).
    missed_count: Mapped[int] = mapped_column(default=0)
    #: Who asked for a manual run.
    by: Mapped[str | None] = mapped_column(String(255))
    note: Mapped[str | None] = mapped_column(String(500))

    def __repr__(self) -> str:
        return f"<Tick {self.id} schedule={self.schedule_id} {self.due_at} {self.outcome}>"
