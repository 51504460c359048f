"""The sweeper: it sends again the work that is due but was never picked up, so that a lost
message or a killed worker never strands an invocation (invariant 4).

The database says what is due; a message is only the doorbell. Four kinds of work can miss
their doorbell: an invocation never admitted (``stepwise.admit``), a wait past its due time
(``stepwise.wait_over``), a performing action past its deadline (``stepwise.timeout``) and a
step opened but whose body never ran or whose retry never came (``stepwise.perform_step``).
Work younger than the grace period is left alone: its message may still be on its way.
Every job is a no-op on redelivery, so sending twice is safe; sending never is not.

Each query reads a small range of an index: the partial indexes of unsettled invocations and
of steps not performed, and the performing actions (at most one per lane, by invariant 1).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session

from . import broker, clock, db, history, status
from .action import Action
from .invocation import Invocation
from .step import Step

log = logging.getLogger("stepwise")

#: How long due work may wait for its message before the sweeper sends it again. Longer
#: than the usual queue latency: a backlog older than this is sent twice (a harmless no-op).
GRACE = timedelta(seconds=30)


@dataclass
class SweepReport:
    """How many messages one sweep sent again, by job."""

    admit: int = 0
    wait_over: int = 0
    timeout: int = 0
    perform_step: int = 0

    @property
    def total(self) -> int:
        return self.admit + self.wait_over + self.timeout + self.perform_step

    def __str__(self) -> str:
        return (
            f"sent again: {self.admit} admissions, {self.wait_over} waits, {self.timeout} timeouts, "
            f"{self.perform_step} steps"
        )


def sweep(session: Session, *, grace: timedelta = GRACE, limit: int = 1000) -> SweepReport:
    """Send again, after this transaction commits, the work that has been due for longer
    than ``grace`` (at most ``limit`` of each kind), recording one ``recovered`` event each.

    On PostgreSQL the rows are read ``FOR UPDATE SKIP LOCKED``: a live worker holds the
    row of the invocation it admits or the step whose body it runs (its lease), so work in
    hand is skipped; a killed worker's connection is gone and its locks with it."""

    def work() -> SweepReport:
        cutoff = clock.now() - grace
        report = SweepReport()
        report.admit = _admissions(session, cutoff, limit)
        report.wait_over = _waits(session, cutoff, limit)
        report.timeout = _timeouts(session, cutoff, limit)
        report.perform_step = _steps(session, cutoff, limit)
        return report

    report = db.retrying(session, work)
    if report.total:
        log.warning("sweeper %s", report)
    return report


def _admissions(session: Session, cutoff: datetime, limit: int) -> int:
    invocations = session.scalars(
        select(Invocation)
        .where(
            Invocation.settled_at.is_(None),  # ix_stepwise_invocations_unsettled
            Invocation.created_at < cutoff,
            Invocation.kind == "action",
        )
        .order_by(Invocation.created_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    ).all()
    for invocation in invocations:
        parent = _step_action(session, invocation.parent_step_id)
        _recovered(session, broker.ADMIT, invocation.id, parent, invocation_id=invocation.id)
    return len(invocations)


def _waits(session: Session, cutoff: datetime, limit: int) -> int:
    # A wait is settled when it concludes; its created_at precedes its due_at, so the
    # unsettled index bounds the scan.
    waits = session.scalars(
        select(Invocation)
        .where(
            Invocation.settled_at.is_(None),  # ix_stepwise_invocations_unsettled
            Invocation.created_at < cutoff,
            Invocation.kind == "wait",
            Invocation.concluded_at.is_(None),
            Invocation.due_at < cutoff,
        )
        .order_by(Invocation.created_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    ).all()
    for wait in waits:
        action = _step_action(session, wait.parent_step_id)
        _recovered(
            session, broker.WAIT_OVER, wait.id, action, invocation_id=wait.id, step_id=wait.parent_step_id
        )
    return len(waits)


def _timeouts(session: Session, cutoff: datetime, limit: int) -> int:
    actions = session.scalars(
        select(Action)
        .where(Action.status == status.PERFORMING, Action.deadline_at < cutoff)
        .order_by(Action.deadline_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    ).all()
    for action in actions:
        deadline = action.deadline_at.isoformat() if action.deadline_at else None
        _recovered(session, broker.TIMEOUT, action.id, action, deadline_at=deadline)
    return len(actions)


def _steps(session: Session, cutoff: datetime, limit: int) -> int:
    rows = session.execute(
        select(Step, Action)
        .join(
            Action,
            and_(Action.id == Step.action_id, Action.current_step_index == Step.definition_index),
        )
        .where(
            Action.status == status.PERFORMING,
            Step.status == status.STEP_PERFORMING,
            Step.performed_at.is_(None),  # ix_stepwise_steps_unperformed
            Step.created_at < cutoff,
            # Opened and never run, or a retry whose message did not come.
            or_(Step.retry_at.is_(None), Step.retry_at < cutoff),
        )
        .order_by(Step.id)
        .limit(limit)
        .with_for_update(skip_locked=True, of=Step)
    ).all()
    for step, action in rows:
        _recovered(session, broker.PERFORM_STEP, step.id, action, step_id=step.id, attempt=step.attempt)
    return len(rows)


def _step_action(session: Session, step_id: int | None) -> Action | None:
    if step_id is None:
        return None
    return session.scalars(
        select(Action).join(Step, Step.action_id == Action.id).where(Step.id == step_id)
    ).first()


def _recovered(
    session: Session,
    job: str,
    job_arg: int,
    action: Action | None,
    *,
    invocation_id: int | None = None,
    step_id: int | None = None,
    **data: Any,
) -> None:
    history.record(
        session,
        action,
        "recovered",
        cause=history.SWEEPER,
        invocation_id=invocation_id,
        step_id=step_id,
        job=job,
        **data,
    )
    broker.enqueue(session, job, job_arg)
