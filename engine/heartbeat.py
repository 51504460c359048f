"""Heartbeats: a running durable attempt reports that it lives, its progress and a
checkpoint, on its attempt row (never the history: a chatty body floods nothing).

Each heartbeat is its own short transaction on another row than the step's, so it commits
while the body runs; it also reads whether the action still performs and the attempt is
still open, which is how cancelling an action (or closing an attempt as lost) reaches a
running body: at its next heartbeat, ``Cancelled`` is raised in it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, select, update
from sqlalchemy.orm import Session

from . import arguments, clock, db, status
from .action import Action
from .attempt import PROGRESS_LENGTH, Attempt
from .errors import ArgumentError, Cancelled

#: Heartbeats closer together than this are kept in memory and written with the next one
#: (or with the attempt's end): a body may call ``heartbeat`` in a tight loop.
THROTTLE = timedelta(seconds=1)


@dataclass
class Beat:
    """The heartbeat of one running attempt (``step.heartbeat``)."""

    attempt_id: int
    action_id: int
    step_id: int
    number: int
    heartbeat_timeout: timedelta | None
    #: The stored form of the last checkpoint (this attempt's or an earlier one's).
    checkpoint: Any
    #: The session the body runs in, and how many writes it had made when the body began.
    body_session: Session
    writes_at_start: int
    last_written: datetime | None = None
    #: What throttled heartbeats reported and is not written yet.
    pending: dict[str, Any] = field(default_factory=dict)

    @property
    def throttle(self) -> timedelta:
        timeout = self.heartbeat_timeout
        return min(timeout / 5, THROTTLE) if timeout is not None else THROTTLE


def beat(b: Beat, progress: Any = None, checkpoint: Any = None) -> None:
    """Record a heartbeat (throttled); ``Cancelled`` when the body should stop."""
    if progress is not None:
        b.pending["progress"] = _progress(progress)
    if checkpoint is not None:
        b.checkpoint = b.pending["checkpoint"] = arguments.dump(checkpoint)
    now = clock.now()
    if b.last_written is not None and now - b.last_written < b.throttle:
        return
    values: dict[str, Any] = {"heartbeat_at": now, **b.pending}
    in_body = _body_holds_the_write_lock(b)
    # A checkpoint counts the body's writes too once it wrote: it commits with them (at the
    # attempt's end), never ahead of them in a transaction of its own.
    held = values.pop("checkpoint", None) if not in_body and body_wrote(b) else None
    if b.heartbeat_timeout is not None:
        values["lost_at"] = now + b.heartbeat_timeout

    def work(session: Session) -> tuple[int, str | None]:
        written = session.execute(
            update(Attempt)
            .where(Attempt.id == b.attempt_id, Attempt.ended_at.is_(None))
            .values(**values)
            .execution_options(synchronize_session=False)
        ).rowcount  # type: ignore[attr-defined]
        return int(written), session.scalar(_STATUS, {"action_id": b.action_id})

    if in_body:
        # SQLite has one writer: a body that wrote holds it, and nothing else can write
        # (not even the watch), so its heartbeat goes in its own transaction.
        written, action_status = work(b.body_session)
    else:
        written, action_status = db.retrying_fresh(work)
    b.pending.clear()
    if held is not None:
        b.pending["checkpoint"] = held
    b.last_written = now
    if not written:
        raise Cancelled(
            f"attempt {b.number} of step {b.step_id} (action {b.action_id}) was closed while it ran: "
            f"it timed out or was considered lost, and the next attempt takes over; stop here",
            "attempt_closed",
        )
    if action_status != status.PERFORMING:
        raise Cancelled(
            f"action {b.action_id} is {action_status} now: its running step {b.step_id} stops at "
            f"this heartbeat (clean up and let this exception propagate)",
            action_status or "not_found",
        )


def checkpoint(session: Session, b: Beat | None) -> Any:
    """The last checkpoint, in its Python form (None: no checkpoint yet)."""
    if b is None or b.checkpoint is None:
        return None
    return arguments.load(session, [b.checkpoint])[0]


def _progress(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ArgumentError(f"heartbeat progress is a fraction from 0 to 1 or a short text, not {value!r}")
    if isinstance(value, str):
        if len(value) > PROGRESS_LENGTH:
            raise ArgumentError(f"heartbeat progress text is at most {PROGRESS_LENGTH} characters")
        return value
    if not 0 <= value <= 1:
        raise ArgumentError(f"heartbeat progress is a fraction from 0 to 1, not {value!r}")
    return float(value)


def body_wrote(b: Beat) -> bool:
    """Whether the body has changed anything in its session (flushed or not)."""
    session = b.body_session
    return db.writes(session) > b.writes_at_start or bool(session.new or session.dirty or session.deleted)


def _body_holds_the_write_lock(b: Beat) -> bool:
    session = b.body_session
    return session.get_bind().dialect.name == "sqlite" and db.writes(session) > b.writes_at_start


#: Whether the action still performs (read with each written heartbeat).
_STATUS = select(Action.status).where(Action.id == bindparam("action_id"))
