"""Attempts: one row per durable attempt of a step body, written before the body runs, so
that whoever reads it later knows the attempt began (and may have had its side effect).

Only steps that opt in (``heartbeat_timeout``, ``attempt_timeout`` or ``recover``) have
attempts; the row holds the attempt's heartbeats, progress and checkpoint, and its end. An
attempt is closed once (``close``, guarded by ``ended_at IS NULL``): a body that concludes
after its attempt was closed as lost or timed out changes nothing (invariant 2, per attempt).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Index,
    String,
    Text,
    UniqueConstraint,
    or_,
    select,
    update,
)
from sqlalchemy.orm import Mapped, Session, mapped_column

from . import clock
from .db import Base, Id, partial_index
from .errors import ActorNotFound, ArgumentError, DefinitionChanged, UnknownAction

if TYPE_CHECKING:
    from .action import Action
    from .definition import Definition
    from .step import Step

#: The longest progress text a heartbeat may report.
PROGRESS_LENGTH = 200

# Outcomes of an attempt.
SUCCEEDED = "succeeded"
FAILED = "failed"
TIMED_OUT = "timed_out"
LOST = "lost"
#: The action was completed (cancelled, timed out) while the attempt ran: its outcome was dropped.
DISCARDED = "discarded"


class Attempt(Base):
    __tablename__ = "stepwise_attempts"
    __table_args__ = (
        # One row per attempt number of a step: a redelivered message cannot start it twice.
        UniqueConstraint("step_id", "attempt"),
        # The watch's question (sweeper, attempt checks): which running attempts are overdue?
        # Only open attempts are in it, a handful whatever the history.
        partial_index(
            "ix_stepwise_attempts_open",
            "id",
            where="ended_at IS NULL",
        ),
        Index("ix_stepwise_attempts_started_at", "started_at"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    #: No foreign key: inserting one would take a KEY SHARE lock on the step row, which the
    #: body's lease (FOR UPDATE) holds while the start commits on another connection.
    step_id: Mapped[int] = mapped_column(BigInteger)
    action_id: Mapped[int] = mapped_column(BigInteger)
    attempt: Mapped[int]
    #: When the attempt became due (the step opened, or its retry's time): queue latency.
    enqueued_at: Mapped[datetime | None]
    started_at: Mapped[datetime]
    heartbeat_at: Mapped[datetime | None]
    #: The last heartbeat's progress: a fraction 0..1 or a short text.
    progress: Mapped[Any] = mapped_column(JSON, nullable=True)
    #: The last checkpoint, in the JSON form of ``engine.arguments``.
    checkpoint: Mapped[Any] = mapped_column(JSON, nullable=True)
    #: host:pid of the worker process that runs it.
    worker: Mapped[str | None] = mapped_column(String(255))
    #: Without a heartbeat by then, the attempt is lost (heartbeat_timeout after the last one).
    lost_at: Mapped[datetime | None]
    #: Past this, the attempt timed out (attempt_timeout after its start).
    deadline_at: Mapped[datetime | None]
    ended_at: Mapped[datetime | None]
    outcome: Mapped[str | None] = mapped_column(String(20))
    error_class: Mapped[str | None] = mapped_column(String(255))
    error_message: Mapped[str | None] = mapped_column(Text)

    def __repr__(self) -> str:
        return f"<Attempt {self.id} step={self.step_id} #{self.attempt} {self.outcome or 'running'}>"

    @property
    def watched_until(self) -> datetime | None:
        """When the watch looks at it next: its heartbeat or its time is up."""
        times = [t for t in (self.lost_at, self.deadline_at) if t is not None]
        return min(times) if times else None


@dataclass(frozen=True)
class Options:
    """A step's durable-attempt options (``@flow.step(heartbeat_timeout=…)`` …)."""

    heartbeat_timeout: timedelta | None = None
    attempt_timeout: timedelta | None = None
    #: The step to go to once this one's retries are exhausted.
    recover: str | None = None

    @property
    def watched(self) -> bool:
        """A body with a heartbeat or attempt timeout runs without holding its step's lease,
        so that a timeout can close its attempt while it hangs."""
        return self.heartbeat_timeout is not None or self.attempt_timeout is not None


def options(
    heartbeat_timeout: timedelta | float | None,
    attempt_timeout: timedelta | float | None,
    recover: str | None,
) -> Options | None:
    """The options as declared, checked; None when none is set (the step runs as before)."""
    if heartbeat_timeout is None and attempt_timeout is None and recover is None:
        return None
    if recover is not None and not isinstance(recover, str):
        raise ArgumentError(f"recover= names a step of the action, not {recover!r}")
    return Options(
        _duration("heartbeat_timeout", heartbeat_timeout),
        _duration("attempt_timeout", attempt_timeout),
        recover,
    )


def _duration(name: str, value: timedelta | float | None) -> timedelta | None:
    if value is None:
        return None
    duration = value if isinstance(value, timedelta) else timedelta(seconds=float(value))
    if duration <= timedelta():
        raise ArgumentError(f"{name} must be positive, not {value!r}")
    return duration


def durable(action: Action, step: Step) -> bool:
    """Whether the step declares durable attempts (read from the code: no query)."""
    try:
        return options_of(action.definition, step.definition_index) is not None
    except (ActorNotFound, DefinitionChanged, UnknownAction):
        return False  # its body fails it as gone


def options_of(definition: Definition, index: int) -> Options | None:
    """The durable-attempt options of the step at ``index`` (no query: read from the code).
    A recovery target is durable too, so that it can run on an actor that is gone."""
    if not definition.attempt_options and definition.default_attempt_options is None:
        return None  # the hot path: a definition that declares none
    names = definition.step_names()
    if not 0 <= index < len(names):  # a compensation step (index -1) has no body
        return None
    name = names[index]
    found = definition.attempt_options.get(name, definition.default_attempt_options)
    if found is not None and found.recover == name:
        found = Options(found.heartbeat_timeout, found.attempt_timeout, None)  # never its own recovery
    if found is None and name in definition.recovery_targets():
        return Options()
    return found


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def open_for(session: Session, step_id: int, number: int) -> Attempt | None:
    """The attempt ``number`` of the step, if it was started."""
    return session.scalars(
        select(Attempt)
        .where(Attempt.step_id == step_id, Attempt.attempt == number)
        .execution_options(populate_existing=True)
    ).one_or_none()


def last_checkpoint(session: Session, step_id: int) -> Any:
    """The stored form of the step's last checkpoint, from any of its attempts."""
    return session.scalar(
        select(Attempt.checkpoint)
        .where(Attempt.step_id == step_id, Attempt.checkpoint.is_not(None))
        .order_by(Attempt.attempt.desc())
        .limit(1)
    )


def start(
    session: Session,
    step_id: int,
    action_id: int,
    number: int,
    options: Options,
    enqueued_at: datetime | None,
) -> Attempt:
    now = clock.now()
    attempt = Attempt(
        step_id=step_id,
        action_id=action_id,
        attempt=number,
        enqueued_at=enqueued_at,
        started_at=now,
        heartbeat_at=now if options.heartbeat_timeout else None,
        worker=worker_name(),
        lost_at=now + options.heartbeat_timeout if options.heartbeat_timeout else None,
        deadline_at=now + options.attempt_timeout if options.attempt_timeout else None,
    )
    session.add(attempt)
    session.flush()
    return attempt


def close(
    session: Session,
    attempt_id: int,
    outcome: str,
    error: BaseException | None = None,
    checkpoint: Any = None,
    progress: Any = None,
) -> bool:
    """End the attempt with ``outcome``, once: False when it was closed already."""
    values: dict[str, Any] = {"ended_at": clock.now(), "outcome": outcome}
    if error is not None:
        kind = f"{type(error).__module__}.{type(error).__qualname__}"  # as engine.action.error_class
        values.update(error_class=kind, error_message=str(error))
    if checkpoint is not None:
        values["checkpoint"] = checkpoint
    if progress is not None:
        values["progress"] = progress
    result = session.execute(
        update(Attempt)
        .where(Attempt.id == attempt_id, Attempt.ended_at.is_(None))
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


def overdue(session: Session, now: datetime, limit: int) -> list[int]:
    """Running attempts whose heartbeat or time is up (the sweeper sends their checks):
    through ix_stepwise_attempts_open, with no grace (a check of one not yet due does nothing)."""
    return list(
        session.scalars(
            select(Attempt.id)
            .where(Attempt.ended_at.is_(None), or_(Attempt.lost_at < now, Attempt.deadline_at < now))
            .order_by(Attempt.id)
            .limit(limit)
        )
    )
