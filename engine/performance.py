"""Performances: the concurrency lane of one ``concurrency_key``.

A lane row exists while the lane has a current action; every change to a lane happens
under its row lock (``SELECT … FOR UPDATE`` on PostgreSQL, the single writer on SQLite),
which serialises joining, superseding, completing and advancing (invariant 1).
"""

from __future__ import annotations

import functools

from sqlalchemy import (
    CTE,
    BigInteger,
    BindParameter,
    ColumnElement,
    Executable,
    Insert,
    String,
    Update,
    bindparam,
    delete,
    exists,
    select,
    true,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import Mapped, Session, mapped_column, relationship

from . import clock, rows, status
from .action import Action
from .db import Base, Id, Timestamps, partial_index


class Performance(Timestamps, Base):
    __tablename__ = "stepwise_performances"
    __table_args__ = (
        partial_index(
            "ix_stepwise_performances_outbound_complete_key",
            "outbound_complete_key",
            where="outbound_complete_key IS NOT NULL",
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
        # Its live members: the actions of its key still pending or performing.
        primaryjoin=(
            "and_(Performance.concurrency_key == foreign(Action.concurrency_key), "
            "Action.status.in_(['pending', 'performing']))"
        ),
        order_by="Action.id",
        viewonly=True,
    )

    def __repr__(self) -> str:
        return f"<Performance {self.id} {self.concurrency_key} current={self.action_id}>"


_LOCKED = select(Performance).with_for_update().execution_options(populate_existing=True)
_LOCK = _LOCKED.where(Performance.concurrency_key == bindparam("key"))


def of(session: Session, action: Action) -> Performance | None:
    """The lane ``action`` is in: its key's lane while it is pending or performing
    (membership follows from the key and the status; no column repeats it)."""
    if action.status not in status.INCOMPLETE:
        return None
    return session.scalars(
        select(Performance).where(Performance.concurrency_key == action.concurrency_key)
    ).one_or_none()


def lock(session: Session, concurrency_key: str) -> Performance | None:
    """The lane of ``concurrency_key``, locked; None when it has none. Sent through psycopg
    alone where it can be, as ``lock_all``'s lanes are: a body that concludes in its own
    transaction takes it for nearly every action."""
    found = rows.read(session, _lock_all_reader, {"keys": [concurrency_key]}, refresh=True)
    if found is not None:
        return found[0][0] if found else None
    return session.scalars(_LOCK, {"key": concurrency_key}).one_or_none()


#: PostgreSQL: the lanes of many keys, locked in key order.
_LOCK_ALL = _LOCKED.where(
    Performance.concurrency_key == bindparam("keys", type_=ARRAY(String)).any_()
).order_by(Performance.concurrency_key)


def lock_all(session: Session, concurrency_keys: set[str]) -> dict[str, Performance]:
    """PostgreSQL: the existing lanes of ``concurrency_keys`` by key, locked in one
    statement, in key order (sent through psycopg alone where it can be, engine/rows.py;
    the lanes the session holds refreshed, as ``_LOCKED``'s ``populate_existing`` does)."""
    if not concurrency_keys:
        return {}
    parameters = {"keys": sorted(concurrency_keys)}
    found = rows.read(session, _lock_all_reader, parameters, refresh=True)
    lanes = [row[0] for row in found] if found is not None else session.scalars(_LOCK_ALL, parameters)
    return {lane.concurrency_key: lane for lane in lanes if lane.concurrency_key is not None}


@functools.cache
def _lock_all_reader(dialect: Dialect) -> rows.Reader:
    statement = select(*rows.columns(Performance)).where(
        Performance.concurrency_key == bindparam("keys", type_=ARRAY(String)).any_()
    )
    statement = statement.order_by(Performance.concurrency_key).with_for_update()
    return rows.Reader(statement, dialect, [Performance])


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


def upcoming(session: Session, concurrency_key: str | None, completing_id: int) -> Action:
    """The lane's next action once ``completing_id`` leaves it: its oldest incomplete
    member after that one (the caller found the lane not empty)."""
    return session.scalars(_UPCOMING, {"key": concurrency_key, "completing_id": completing_id}).one()


#: The statuses of a lane's live members, written into the statement's text rather than sent
#: as parameters: PostgreSQL can then serve it with the lane index (``ix_stepwise_actions_lane``,
#: whose predicate is on these statuses) in the plan it keeps for a prepared statement, where
#: with parameters it read every action the key ever had (20,000 rows, for one live).
LIVE: BindParameter[list[str]] = bindparam(
    "live_statuses", sorted(status.INCOMPLETE), expanding=True, literal_execute=True
)

_UPCOMING = (
    select(Action)
    .where(
        Action.concurrency_key == bindparam("key"),
        Action.status.in_(LIVE),
        Action.id != bindparam("completing_id"),
    )
    .order_by(Action.id)
    .limit(1)
    .execution_options(populate_existing=True)
)


def close_if_empty(session: Session, lane: Performance, completing_id: int) -> bool:
    """Remove the lane when no incomplete action is left in it but ``completing_id``: True
    if removed. The caller holds the lane's lock, which every joining action needs."""
    removed = session.connection().execute(
        _CLOSE, {"lane_id": lane.id, "key": lane.concurrency_key, "completing_id": completing_id}
    )
    if removed.first() is None:
        return False
    session.expunge(lane)
    return True


_members = Action.__table__.c


def _no_other_member(key: str, completing_id: str) -> ColumnElement[bool]:
    """True when the lane keyed by the parameter ``key`` has no incomplete member but the
    parameter ``completing_id``: its first other member by id is none, which only a probe of
    the lane index by key returns without sorting, whatever PostgreSQL believes of the live
    rows (engine/recordset.py; an EXISTS would drop the order)."""
    first = (
        select(_members.id)
        .where(
            _members.concurrency_key == bindparam(key),
            _members.status.in_(LIVE),
            _members.id != bindparam(completing_id),
        )
        .order_by(_members.id)
        .limit(1)
        .scalar_subquery()
    )
    return first.is_(None)


_CLOSE = (
    delete(Performance)
    .where(Performance.id == bindparam("lane_id"), _no_other_member("key", "completing_id"))
    .returning(Performance.__table__.c.id)
)


@functools.cache  # one per guarded UPDATE (built once: action._status_update) and CTE
def closing(guarded: Update, also: CTE | None = None) -> Executable:
    """PostgreSQL: ``guarded`` (the UPDATE that completes the lane's current action) and,
    when it matched, ``close_if_empty``'s DELETE of the lane, in one statement
    (data-modifying CTEs): one row per action updated, (its id, the lane's id if the lane
    was removed). Parameters: ``c_lane_id``, ``c_key``, ``c_completing_id``. The lane's
    other members are read as of the statement's start, when the completing action is
    still incomplete: it is left out by its id, as ``close_if_empty`` leaves it out. The
    caller holds the lane's lock, taken by a statement of its own: a lock waited for inside
    this statement would leave it reading the members as they were before the wait (READ
    COMMITTED reads with the snapshot a statement began with) and removing a lane that
    just got a member. ``also``: one more data-modifying CTE (the completing step's own
    write, ``step.writing``), with its own parameters."""
    completed = guarded.returning(guarded.table.c.id).cte("completed")
    closed = (
        delete(Performance)
        .where(
            Performance.id == bindparam("c_lane_id"),
            exists(select(completed.c.id)),
            _no_other_member("c_key", "c_completing_id"),
        )
        .returning(Performance.__table__.c.id)
        .cte("closed")
    )
    statement = select(completed.c.id, closed.c.id.label("closed_lane_id")).select_from(
        completed.outerjoin(closed, true())
    )
    return statement if also is None else statement.add_cte(also)


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
