"""Performances: the concurrency lane of one ``concurrency_key``.

A lane row exists while the lane has a current action; every change to a lane happens
under its row lock (``SELECT … FOR UPDATE`` on PostgreSQL, the single writer on SQLite),
which serialises joining, superseding, completing and advancing (invariant 1).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import BigInteger, Index, Insert, String, bindparam, delete, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Mapped, Session, make_transient, mapped_column, relationship

from . import achievement, clock, history, status
from .action import Action, finalize, perform, write_status
from .db import Base, Id, Timestamps

if TYPE_CHECKING:
    from .invocation import Invocation


class Performance(Timestamps, Base):
    __tablename__ = "stepwise_performances"
    __table_args__ = (
        Index(
            "ix_stepwise_performances_outbound_complete_key",
            "outbound_complete_key",
            sqlite_where=text("outbound_complete_key IS NOT NULL"),
            postgresql_where=text("outbound_complete_key IS NOT NULL"),
        ),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    # Unique: one lane per key; two admissions creating it at once collide here and the
    # loser retries by locking the winner's row.
    concurrency_key: Mapped[str | None] = mapped_column(String(255), unique=True)
    #: The lane's current action: performing, or about to. No foreign key, to keep the
    #: two tables free of a cycle; the lane lock keeps it right.
    action_id: Mapped[int] = mapped_column(BigInteger, unique=True)
    #: The current action's tenancy key while it is outbound, else NULL.
    outbound_complete_key: Mapped[str | None] = mapped_column(String(255))

    action: Mapped[Action] = relationship(
        primaryjoin="foreign(Performance.action_id) == Action.id", viewonly=True
    )
    actions: Mapped[list[Action]] = relationship(
        primaryjoin="Performance.id == foreign(Action.performance_id)",
        order_by="Action.id",
        viewonly=True,
    )

    def __repr__(self) -> str:
        return f"<Performance {self.id} {self.concurrency_key} current={self.action_id}>"


@dataclass
class Completion:
    """The result of completing an action from outside. Falsy when nothing was completed:
    ``reason`` is then ``"already_completed"`` or ``"not_found"``."""

    completed: bool
    reason: str
    action: Action | None = None

    def __bool__(self) -> bool:
        return self.completed


_LOCK = (
    select(Performance)
    .where(Performance.concurrency_key == bindparam("key"))
    .with_for_update()
    .execution_options(populate_existing=True)
)


def lock(session: Session, concurrency_key: str) -> Performance | None:
    return session.scalars(_LOCK, {"key": concurrency_key}).one_or_none()


def lane_actions(session: Session, lane: Performance) -> list[Action]:
    return list(
        session.scalars(
            select(Action)
            .where(Action.performance_id == lane.id)
            .order_by(Action.id)
            .execution_options(populate_existing=True)
        )
    )


def create(session: Session, founder: Action) -> int | None:
    """Open the lane of ``founder``'s key with ``founder`` current: the new lane's id, or
    None when another transaction opened that lane first (PostgreSQL waits for it to
    commit; SQLite's single writer never gets here twice)."""
    connection = session.connection()
    now = clock.now()
    values = {
        "concurrency_key": founder.concurrency_key,
        "action_id": founder.id,
        "outbound_complete_key": founder.tenancy_key if founder.outbound else None,
        "created_at": now,
        "updated_at": now,
    }
    return connection.execute(_create(connection.dialect.name), values).scalar()


@functools.cache
def _create(dialect: str) -> Insert:
    insert = pg_insert if dialect == "postgresql" else sqlite_insert
    return (
        insert(Performance)
        .on_conflict_do_nothing(index_elements=["concurrency_key"])
        .returning(Performance.__table__.c.id)
    )


def set_current(lane: Performance, action: Action) -> None:
    lane.action_id = action.id
    lane.outbound_complete_key = action.tenancy_key if action.outbound else None


def obtain_for(
    session: Session, candidate: Action, invocation: Invocation, parent_action: Action | None = None
) -> Action:
    """Admit ``candidate`` (invoked by a step of ``parent_action``, if any) to its lane: skip
    it, deadlock it, attach it to the same work, or queue it (superseding older queued
    work). Returns the admitted or reused action, or the unsaved candidate with its final
    status."""
    from .invocation import attach, settle_unadmitted

    key = candidate.concurrency_key
    while True:
        lane = lock(session, key)
        if achievement.exists(session, candidate.checksum_key, candidate.checksum):
            candidate.status = status.SUCCEEDED
            invocation.checksum_key = candidate.checksum_key
            return settle_unadmitted(session, invocation, candidate, "skipped")
        if lane is None:
            session.add(candidate)
            session.flush()
            lane_id = create(session, candidate)
            if lane_id is None:
                # Another admission created the lane first: lock it and share it.
                session.delete(candidate)
                session.flush()
                make_transient(candidate)
                candidate.id = None  # type: ignore[assignment]
                continue
            history.record(session, candidate, "admitted", lane=key, invocation_id=invocation.id)
            perform(session, candidate, performance_id=lane_id)
            return candidate
        current = session.get(Action, lane.action_id, populate_existing=True)
        if current is not None and parent_action is not None:
            from .action import ancestors_include

            if ancestors_include(session, {parent_action.id}, current.id):
                return deadlock(session, candidate, invocation, current)
        members = lane_actions(session, lane)
        if candidate.checksum is not None:
            for existing in members:
                # Invariant 5: only work that will still conclude can be shared.
                if (
                    existing.status in status.INCOMPLETE
                    and existing.checksum_key == candidate.checksum_key
                    and existing.checksum == candidate.checksum
                ):
                    return attach(session, invocation, existing)
        candidate.performance_id = lane.id
        session.add(candidate)
        session.flush()
        history.record(session, candidate, "queued", lane=key, invocation_id=invocation.id)
        for queued in members:
            if queued.status == status.PENDING and queued.id != lane.action_id:
                supersede(session, queued, candidate)
        return candidate


def supersede(session: Session, old: Action, new: Action) -> None:
    """``new`` replaces the queued ``old``: everyone waiting on ``old`` now waits on ``new``."""
    from .invocation import Invocation
    from .step import link, step_actions

    if not write_status(
        session, old, status.SUPERSEDED, completed_at=new.created_at, superseded_by_id=new.id
    ):
        return
    session.execute(
        update(Invocation)
        .where(Invocation.action_id == old.id, Invocation.concluded_at.is_(None))
        .values(action_id=new.id)
        .execution_options(synchronize_session=False)
    )
    parents = session.scalars(
        select(step_actions.c.parent_step_id).where(step_actions.c.child_action_id == old.id)
    ).all()
    for step_id in parents:
        link(session, step_id, new.id)
    history.record(session, old, "superseded", by_action_id=new.id)


def deadlock(session: Session, candidate: Action, invocation: Invocation, holder: Action) -> Action:
    from .config import handles
    from .errors import Deadlock
    from .invocation import settle_unadmitted

    error = Deadlock(
        f"{candidate.name} on {candidate.actor_type}/{candidate.actor_id} would wait for lane "
        f"{candidate.concurrency_key!r}, held by its ancestor action {holder.id} ({holder.name})"
    )
    if not handles(error):
        raise error
    candidate.status = status.DEADLOCKED
    candidate.record_error(error)
    return settle_unadmitted(session, invocation, candidate, "deadlocked", error=error)


def complete_action(
    session: Session,
    action: Action,
    to: str,
    *,
    cause: str = history.WORKER,
    by: str | None = None,
    note: str | None = None,
    error: BaseException | None = None,
) -> Completion:
    """Complete ``action`` (pending or performing) under its lane's lock and advance the lane."""
    session.flush()
    lane = lock(session, action.concurrency_key)
    fresh = session.get(Action, action.id, populate_existing=True)
    assert fresh is not None
    if fresh.status not in status.INCOMPLETE:
        return Completion(False, "already_completed", fresh)
    forward(session, lane, fresh, to, cause=cause, by=by, note=note, error=error)
    return Completion(True, "completed", fresh)


def forward(
    session: Session,
    lane: Performance | None,
    completing: Action,
    to: str,
    *,
    cause: str = history.WORKER,
    by: str | None = None,
    note: str | None = None,
    error: BaseException | None = None,
    unperformed_steps: bool = True,
) -> None:
    """Complete ``completing`` and move its lane on: the caller holds the lane's lock and
    has read the action's status under it. A step that concludes its action leaves no step
    whose body never ran (``unperformed_steps=False``)."""
    finalize(
        session,
        completing,
        to,
        cause=cause,
        by=by,
        note=note,
        error=error,
        unperformed_steps=unperformed_steps,
    )
    if lane is None:
        return  # not in a lane (it should be): completed all the same rather than stranded
    if completing.id != lane.action_id:
        return  # a queued action left the lane; the current one keeps it
    upcoming = session.scalars(_UPCOMING, {"lane_id": lane.id, "completing_id": completing.id}).first()
    if upcoming is not None:
        set_current(lane, upcoming)
        session.flush()
        if upcoming.status == status.PENDING:
            perform(session, upcoming)
    else:
        # Its members' performance_id goes NULL with it (ON DELETE SET NULL).
        session.connection().execute(_DELETE, {"lane_id": lane.id})
        session.expunge(lane)


#: The lane's next action: the oldest incomplete one after the completing one.
_UPCOMING = (
    select(Action)
    .where(
        Action.performance_id == bindparam("lane_id"),
        Action.status.in_(status.INCOMPLETE),
        Action.id != bindparam("completing_id"),
    )
    .order_by(Action.id)
    .limit(1)
    .execution_options(populate_existing=True)
)
_DELETE = delete(Performance).where(Performance.id == bindparam("lane_id"))


def outbound_lane(session: Session, tenancy_key: str) -> Performance | None:
    """The lane whose current outbound action has this tenancy key. When one actor and
    action name holds several lanes (a concurrency_key built from the arguments), the one
    whose current action is oldest (lowest id) is chosen."""
    return session.scalars(
        select(Performance)
        .where(Performance.outbound_complete_key == tenancy_key)
        .order_by(Performance.action_id)
        .limit(1)
        .with_for_update()
        .execution_options(populate_existing=True)
    ).one_or_none()
