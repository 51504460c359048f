"""The sweeper: it sends again the work that is due but was never picked up, so that a lost
message or a killed worker never strands an invocation (invariant 4).

The database says what is due; a message is only the doorbell. Four kinds of work can miss
their doorbell: an invocation never admitted (``stepwise.admit``), a wait past its due time
(``stepwise.wait_over``), a performing action past its deadline (``stepwise.timeout``) and a
step opened but whose body never ran or whose retry never came (``stepwise.perform_step``).
Work younger than the grace period is left alone: its message may still be on its way.
Every job is a no-op on redelivery, so sending twice is safe; sending never is not.

The sweeper remembers what it sent: each swept row counts its re-sends (``resend_count``)
and is left alone until ``next_sweep_at``, twice as long after each one, so a backlog is not
sent again on every sweep. Work sent ``MAX_RESENDS`` times without progress can never
succeed (an error nothing handles, a broken deploy): it fails visibly with ``Stalled``
instead of being sent forever and crowding real recoveries out of the sweep's limit.

Each query reads a small range of an index: the partial indexes of unsettled invocations,
of waits not concluded and of steps not performed, and the performing actions (at most one
per lane, by invariant 1).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import Any

import dramatiq
from sqlalchemy import ColumnElement, and_, literal_column, or_, select
from sqlalchemy.orm import Session

from . import attempt, broker, bulk_work, clock, db, history, inbox, registry, stalled, status
from .action import Action
from .errors import Stalled
from .invocation import Invocation
from .step import Step, job_sent, unclaimed
from .step_body import dispatch_ready

log = logging.getLogger("stepwise")

#: How long due work may wait for its message before the sweeper sends it again. Longer
#: than the usual queue latency; the next re-send waits twice as long, and so on.
GRACE = timedelta(seconds=30)
#: How many times the sweeper sends the same work again before it gives up on it: with
#: ``GRACE`` and ``MAX_BACKOFF``, about three hours after the first re-send.
MAX_RESENDS = 8
#: The longest the sweeper leaves work alone between two re-sends.
MAX_BACKOFF = timedelta(hours=1)

Swept = Invocation | Step | Action


def backoff(grace: timedelta, resends: int) -> timedelta:
    """How long work sent again ``resends`` times is left alone before it is due again."""
    return min(grace * int(2 ** min(resends, 16)), MAX_BACKOFF)


@dataclass
class SweepReport:
    """How many messages one sweep sent again, by job, and how much work it gave up on."""

    admit: int = 0
    wait_over: int = 0
    timeout: int = 0
    perform_step: int = 0
    job: int = 0
    complete: int = 0
    signals: int = 0
    bulk_runs: int = 0
    attempts: int = 0
    gave_up: int = 0

    @property
    def total(self) -> int:
        sent = self.admit + self.wait_over + self.timeout + self.perform_step + self.job + self.complete
        return sent + self.signals + self.bulk_runs + self.attempts + self.gave_up

    def __str__(self) -> str:
        return (
            f"sent again: {self.admit} admissions, {self.wait_over} waits, {self.timeout} timeouts, "
            f"{self.perform_step} steps, {self.job} jobs, {self.complete} completions, "
            f"{self.signals} signal matches, {self.bulk_runs} bulk runs, {self.attempts} overdue attempts; "
            f"gave up on {self.gave_up}"
        )


def sweep(
    session: Session, *, grace: timedelta = GRACE, limit: int = 1000, max_resends: int = MAX_RESENDS
) -> SweepReport:
    """Send again, after this transaction commits, the work that has been due for longer
    than ``grace`` (at most ``limit`` of each kind), recording one ``recovered`` event each;
    then fail, each in its own transaction, the work already sent ``max_resends`` times.

    On PostgreSQL the rows are read ``FOR UPDATE SKIP LOCKED``: a live worker holds the
    row of the invocation it admits or the step whose body it runs (its lease), so work in
    hand is skipped; a killed worker's connection is gone and its locks with it."""

    def work() -> _Sweep:
        state = _Sweep(session, grace, max_resends, limit)
        _admissions(state)
        _waits(state)
        _timeouts(state)
        _steps(state)
        _jobs(state)
        _completions(state)
        for attempt_id in attempt.overdue(session, state.now, limit):  # lost heartbeats, attempt timeouts
            broker.enqueue(session, broker.CHECK_ATTEMPT, attempt_id)
            state.report.attempts += 1
        for action_id in inbox.unmatched(session, state.cutoff, limit):  # a lost match message
            broker.enqueue(session, broker.MATCH_SIGNALS, action_id)
            state.report.signals += 1
        return state

    state = db.retrying(session, work)
    for give_up in state.giving_up:
        # Apart, so that work which cannot even be failed leaves the rest of the sweep
        # alone; it was backed off above, and is tried again then.
        try:
            state.report.gave_up += db.retrying(session, give_up)
        except Exception:
            log.exception("stepwise: the sweeper could not give up on stalled work")
    dispatch_ready(session)
    state.report.bulk_runs = len(bulk_work.resend_stale(session))
    if state.report.total:
        log.warning("sweeper %s", state.report)
    return state.report


@dataclass
class _Sweep:
    """One sweep's transaction: what is due, and the work it gives up on after commit."""

    session: Session
    grace: timedelta
    max_resends: int
    limit: int
    now: datetime = field(default_factory=clock.now)
    report: SweepReport = field(default_factory=SweepReport)
    giving_up: list[Callable[[], bool]] = field(default_factory=list)

    @property
    def cutoff(self) -> datetime:
        return self.now - self.grace

    def due(self, model: type[Swept]) -> ColumnElement[bool]:
        """Never sent again, or left alone long enough since it was."""
        return or_(model.next_sweep_at.is_(None), model.next_sweep_at <= self.now)

    def resend(self, row: Swept) -> bool:
        """Count one more re-send of ``row`` and back it off; False, and backed off all the
        same, when it was sent again ``max_resends`` times already."""
        exhausted = row.resend_count >= self.max_resends
        if not exhausted:
            row.resend_count += 1
        row.next_sweep_at = self.now + backoff(self.grace, row.resend_count)
        return not exhausted

    def give_up(self, fail: Callable[..., bool], error: Stalled, **ids: int | bool) -> None:
        """Run ``fail(session, error, **ids)`` in its own transaction after this one."""
        self.giving_up.append(partial(fail, self.session, error, **ids))


def _unsettled(sweep: _Sweep, kind: str) -> list[Invocation]:
    """The oldest invocations of ``kind`` never settled and due for a re-send, skipping
    those a live worker holds."""
    return list(
        sweep.session.scalars(
            select(Invocation)
            .where(
                Invocation.settled_at.is_(None),  # ix_stepwise_invocations_unsettled
                Invocation.created_at < sweep.cutoff,
                Invocation.kind == kind,
                sweep.due(Invocation),
            )
            .order_by(Invocation.created_at)
            .limit(sweep.limit)
            .with_for_update(skip_locked=True)
        )
    )


def _admissions(sweep: _Sweep) -> None:
    invocations = _unsettled(sweep, "action")
    for invocation in invocations:
        if sweep.resend(invocation):
            parent = _step_action(sweep.session, invocation.parent_step_id)
            _recovered(sweep, broker.ADMIT, invocation, parent, invocation_id=invocation.id)
            sweep.report.admit += 1
            continue
        error = stalled.admission(invocation)
        sweep.give_up(stalled.fail_admission, error, invocation_id=invocation.id)


#: Literals, not parameters: both planners then match the partial index's own condition.
_WAITING = and_(Invocation.kind == literal_column("'wait'"), Invocation.concluded_at.is_(None))


def _waits(sweep: _Sweep) -> None:
    waits = sweep.session.scalars(
        select(Invocation)
        .where(_WAITING, Invocation.due_at < sweep.cutoff, sweep.due(Invocation))  # ..._due_waits
        .order_by(Invocation.due_at)
        .limit(sweep.limit)
        .with_for_update(skip_locked=True)
    ).all()
    for wait in waits:
        action = _step_action(sweep.session, wait.parent_step_id)
        if action is None:
            continue
        if sweep.resend(wait):
            step_id = wait.parent_step_id
            _recovered(sweep, broker.WAIT_OVER, wait, action, invocation_id=wait.id, step_id=step_id)
            sweep.report.wait_over += 1
        else:
            error = stalled.in_action(f"wait {wait.id}", action, wait.resend_count, "it never concluded")
            sweep.give_up(stalled.fail_wait, error, wait_id=wait.id)


def _timeouts(sweep: _Sweep) -> None:
    actions = sweep.session.scalars(
        select(Action)
        .where(Action.status == status.PERFORMING, Action.deadline_at < sweep.cutoff, sweep.due(Action))
        .order_by(Action.deadline_at)
        .limit(sweep.limit)
        .with_for_update(skip_locked=True)
    ).all()
    for action in actions:
        if sweep.resend(action):
            deadline = action.deadline_at.isoformat() if action.deadline_at else None
            _recovered(sweep, broker.TIMEOUT, action, action, deadline_at=deadline)
            sweep.report.timeout += 1
        else:
            error = stalled.in_action("the timeout", action, action.resend_count, "it never took effect")
            sweep.give_up(stalled.fail_action, error, action_id=action.id)


def _current_steps(sweep: _Sweep, *conditions: Any) -> list[Any]:
    """The current steps of performing actions that match ``conditions`` and are due for a
    re-send, with their actions, skipping the steps a live worker holds (its lease)."""
    return list(
        sweep.session.execute(
            select(Step, Action)
            .join(
                Action,
                and_(Action.id == Step.action_id, Action.current_step_index == Step.definition_index),
            )
            .where(Action.status == status.PERFORMING, *conditions, sweep.due(Step))
            .order_by(Step.id)
            .limit(sweep.limit)
            .with_for_update(skip_locked=True, of=Step)
        ).all()
    )


def _steps(sweep: _Sweep) -> None:
    rows = _current_steps(
        sweep,
        Step.status == status.STEP_PERFORMING,
        Step.performed_at.is_(None),  # ix_stepwise_steps_unperformed
        Step.created_at < sweep.cutoff,
        # Opened and never run, or a retry whose message did not come.
        or_(Step.retry_at.is_(None), Step.retry_at < sweep.cutoff),
        unclaimed(sweep.now),  # else a live worker runs it (engine/claiming.py)
    )
    for step, action in rows:
        if sweep.resend(step):
            _recovered(sweep, broker.PERFORM_STEP, step, action, step_id=step.id, attempt=step.attempt)
            sweep.report.perform_step += 1
        else:
            never = "its body never completed"
            error = stalled.in_action(f"step {step.id}", action, step.resend_count, never)
            sweep.give_up(stalled.fail_action, error, action_id=action.id, step_id=step.id, unperformed=True)


def _jobs(sweep: _Sweep) -> None:
    """Job-backed actions awaiting their job, whose send was never confirmed: the step
    that sent it concluded (in the transaction that would have advanced the action), and
    the action performs on."""
    rows = _current_steps(
        sweep,
        Action.job.is_not(None),
        Step.status == status.STEP_SUCCEEDED,
        Step.job_sent_at.is_(None),
        Step.performed_at < sweep.cutoff,
    )
    for step, action in rows:
        job = _job_named(action.job or "")
        if job is None:
            # Not imported by this process: say so, and look again later, without counting.
            log.warning(
                "stepwise: the sweeper does not know job %r (action %s): import its module",
                action.job,
                action.id,
            )
            step.next_sweep_at = sweep.now + backoff(sweep.grace, step.resend_count + 1)
        elif sweep.resend(step):
            sent = partial(job_sent, step.id)
            _recovered(sweep, job, step, action, message=(action.id,), on_sent=sent, step_id=step.id)
            sweep.report.job += 1
        else:
            error = stalled.in_action(
                f"job {action.job!r}", action, step.resend_count, "no send was confirmed"
            )
            sweep.give_up(stalled.fail_action, error, action_id=action.id, step_id=step.id, unsent_job=True)


def _job_named(name: str) -> Any:
    """The job of that name: one a definition uses, or one declared on the broker."""
    for job in registry.job_classes():
        if getattr(job, "actor_name", None) == name:
            return job
    declared = dramatiq.get_broker()
    return declared.get_actor(name) if name in declared.get_declared_actors() else None


def _completions(sweep: _Sweep) -> None:
    """``complete_later`` requests never carried out."""
    requests = _unsettled(sweep, "complete")
    for request in requests:
        action = sweep.session.get(Action, request.action_id) if request.action_id else None
        if sweep.resend(request):
            to = request.arguments_json[0]
            message = (request.actor_type, request.actor_id, request.name, to, request.action_id, request.id)
            _recovered(sweep, broker.COMPLETE, request, action, message=message, invocation_id=request.id)
            sweep.report.complete += 1
        else:
            sweep.give_up(stalled.fail_completion, stalled.completion(request), request_id=request.id)


def _step_action(session: Session, step_id: int | None) -> Action | None:
    if step_id is None:
        return None
    return session.scalars(
        select(Action).join(Step, Step.action_id == Action.id).where(Step.id == step_id)
    ).first()


def _recovered(
    sweep: _Sweep,
    job: str | Any,
    row: Swept,
    action: Action | None,
    *,
    message: tuple[Any, ...] | None = None,
    on_sent: Callable[[], Any] | None = None,
    invocation_id: int | None = None,
    step_id: int | None = None,
    **data: Any,
) -> None:
    """Record the recovery and send ``job`` (an engine job's name, or a Dramatiq actor)
    again, with ``message`` (default: the row's id)."""
    history.record(
        sweep.session,
        action,
        "recovered",
        cause=history.SWEEPER,
        invocation_id=invocation_id,
        step_id=step_id,
        job=getattr(job, "actor_name", job),
        resend=row.resend_count,
        **data,
    )
    broker.enqueue(sweep.session, job, *(message or (row.id,)), on_sent=on_sent)
