"""History: the append-only event log of every action.

Every state change lands here with its cause (invariant 7): the data behind the studio's
trace and timeline. A transaction's events are kept in its session and written together,
in one INSERT (one JSON parameter on PostgreSQL: engine/recordset.py), just before it commits (or
earlier, by ``write_pending``); a rollback drops them with the rest of the transaction.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import JSON, BigInteger, Index, String, Table, event, insert
from sqlalchemy.orm import Mapped, Session, SessionTransaction, mapped_column

from . import clock, commit_buffers, counter, recordset
from .db import Base, Id

if TYPE_CHECKING:
    from .action import Action

log = logging.getLogger("stepwise")

# Causes: who or what made the change.
WORKER = "worker"
CALLER = "caller"
OPERATOR = "operator"
WEBHOOK = "webhook"
TIMEOUT = "timeout"
SWEEPER = "sweeper"


class ActionEvent(Base):
    __tablename__ = "stepwise_action_events"
    __table_args__ = (
        Index("ix_stepwise_action_events_action", "action_id", "id"),
        # Reading one whole tree's history in order.
        Index("ix_stepwise_action_events_tree", "root_id", "id"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    action_id: Mapped[int | None] = mapped_column(BigInteger)
    root_id: Mapped[int | None] = mapped_column(BigInteger)
    invocation_id: Mapped[int | None] = mapped_column(BigInteger)
    step_id: Mapped[int | None] = mapped_column(BigInteger)
    event: Mapped[str] = mapped_column(String(40))
    cause: Mapped[str] = mapped_column(String(20))
    by: Mapped[str | None] = mapped_column(String(255))
    at: Mapped[datetime] = mapped_column(default=clock.now)
    data: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)

    def __repr__(self) -> str:
        return f"<ActionEvent {self.event} action={self.action_id} {self.data}>"


def record(
    session: Session,
    action: Action | None,
    event: str,
    *,
    cause: str = WORKER,
    by: str | None = None,
    invocation_id: int | None = None,
    step_id: int | None = None,
    at: datetime | None = None,
    **data: Any,
) -> None:
    """Append one event to ``action``'s history (written when the transaction commits) and
    log one line for it (``_level``). ``at`` is the time of the transition the event is
    part of, when its writer read the clock already (a batch reads it once for all its
    rows): the event's time is then its rows' time; else the clock's."""
    entry = {
        "action_id": action.id if action is not None else None,
        "root_id": action.tree_id if action is not None else None,
        "invocation_id": invocation_id,
        "step_id": step_id,
        "event": event,
        "cause": cause,
        "by": by,
        "at": at or clock.now(),
        "data": data,
    }
    pending = session.info.get(_PENDING)
    if pending is None:
        pending = session.info[_PENDING] = []
    pending.append(entry)
    level = _level(event, data)
    if not log.isEnabledFor(level):
        return
    # One line per event: the traceback stays in the history (and the studio), not the log.
    shown = {key: value for key, value in data.items() if key != "traceback"}
    if action is not None:
        log.log(
            level,
            "%s action=%s name=%s actor=%s/%s cause=%s %s",
            event,
            action.id,
            action.name,
            action.actor_type,
            action.actor_id,
            cause,
            shown or "",
        )
    else:
        log.log(level, "%s invocation=%s cause=%s %s", event, invocation_id, cause, shown or "")


def _level(event: str, data: dict[str, Any]) -> int:
    """A WARNING for every error; every other event, a completed action's too, a DEBUG
    line: the history table keeps them all, and a line per action at INFO cost a busy
    worker ~5% of its CPU (formatted, written, and forwarded by Dramatiq's parent process)
    for what the studio and the metrics already show."""
    return logging.WARNING if "error_class" in data else logging.DEBUG


_PENDING = "stepwise.history"
commit_buffers.COMMIT_BUFFERS.add(_PENDING)
EVENTS = cast(Table, ActionEvent.__table__)


def write_pending(session: Session) -> None:
    """Write the events recorded in this transaction so far, in one statement."""
    pending = session.info.pop(_PENDING, None)
    if pending:
        connection = session.connection()
        if connection.dialect.name == "postgresql":
            # One statement, whose text is the same for any number of events: the events,
            # and the counters they add to (completions, retries, recoveries) as its CTE.
            counted = (counter.COUNTER_TABLE, counter.event_rows(pending), counter.ADD)
            recordset.insert(connection, EVENTS, pending, also=counted)
        else:
            connection.execute(insert(EVENTS), pending)
            counter.count_events(session, pending)  # one statement


@event.listens_for(Session, "before_commit")
def _write_before_commit(session: Session) -> None:
    if not commit_buffers.in_savepoint(session):  # written once, at the root's commit
        write_pending(session)


@event.listens_for(Session, "after_transaction_end")
def _drop_at_end(session: Session, transaction: SessionTransaction) -> None:
    if transaction.parent is None:  # rolled back or closed: its events go with it
        session.info.pop(_PENDING, None)
