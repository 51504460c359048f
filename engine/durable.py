"""Durable attempts: the body of a step that declares ``heartbeat_timeout``,
``attempt_timeout`` or ``recover`` runs with its attempt's start recorded before it runs.

A *watched* step (a heartbeat or attempt timeout) commits its attempt's start under its
lease, then runs the body without holding the lease, and concludes under the step's lock
only if the step is still at this attempt and the attempt still open; otherwise the body's
writes are rolled back and its outcome dropped. The watch (``check``: a message due at the
attempt's deadline, and the sweeper) closes an overdue attempt as timed out or lost and
follows the retry policy, so a late body can never conclude. A step with only ``recover``
keeps its lease while the body runs, as any step, and records the start in a transaction
of its own: an open attempt found when the lease is free again means its worker died.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from . import attempt, broker, clock, counter, db, heartbeat, history, lease, status
from .action import Action
from .conclusion import Outcome, conclude_body
from .errors import (
    ActorNotFound,
    AttemptLost,
    AttemptTimedOut,
    Cancelled,
    DefinitionChanged,
    HeartbeatTimedOut,
    UnknownAction,
)
from .step import Step
from .step_body import close_unperformed, run_body, step_function
from .step_context import StepContext

log = logging.getLogger("stepwise")

#: A watched step's ``next_sweep_at`` while its attempt runs: the sweeper's pass over
#: unperformed steps leaves it to the watch (its heartbeats may go on for hours).
WATCHED = datetime(9999, 12, 31)
_GONE = (ActorNotFound, DefinitionChanged, UnknownAction)
#: The attempts whose bodies run in this process now: on SQLite, which keeps no lease while
#: a body runs, a redelivered message must not take them for lost.
_RUNNING: set[int] = set()


@dataclass
class _Begun:
    step: Step
    action: Action
    options: attempt.Options
    attempt_id: int
    number: int
    checkpoint: Any
    started_at: datetime
    deadline_at: datetime | None
    #: Whether the start committed in the body's session (else the lease is still held).
    committed: bool


def run(step_id: int) -> tuple[list[int], list[int]]:
    """Run one durable attempt of the step (a worker's ``stepwise.perform_attempt``): the
    steps it made ready and the invocations it made due."""
    admissions: list[int] = []
    with db.session() as session, broker.admitting_here(session, admissions):
        begun = _begin(session, step_id)
        if begun is not None:
            _run_body(session, begun)
        ready = broker.ready(session)[:]
    return ready, admissions


def _begin(session: Session, step_id: int) -> _Begun | None:
    """Take the lease and record the attempt's start; None when there is nothing to run
    (what the lease found is committed then). On SQLite the write lock is taken first, so
    that what decides and what is written see one state."""
    db.lock_for_write(session)
    row = session.execute(lease.LEASE, {"step_id": step_id}).one_or_none()
    step, action = row if row is not None else (None, None)
    if (
        step is None
        or action is None
        or step.performed_at is not None
        or step.status != status.STEP_PERFORMING
    ):
        session.rollback()
        return None
    if action.status != status.PERFORMING:
        close_unperformed(step)
        session.commit()
        return None
    if step.retry_at is not None and step.retry_at > clock.now():
        broker.enqueue(session, broker.PERFORM_STEP, step.id, delay=step.retry_at - clock.now())
        session.commit()
        return None
    options = attempt.options_of(action.definition, step.definition_index) or attempt.Options()
    found = attempt.open_for(session, step.id, step.attempt)
    if found is not None and found.ended_at is None:
        # We hold the lease its worker held: it died. SQLite keeps no lease while the body
        # runs, so there its worker must be gone too.
        sqlite = session.get_bind().dialect.name == "sqlite"
        if not options.watched and (not sqlite or _died(found)):
            _lost(session, step, action, found)
        session.commit()  # a watched attempt in flight: the watch sees to it
        return None
    if found is not None:  # closed (its action was reopened since): a new attempt
        step.attempt += 1
    try:
        step_function(action, step)
        _actor(action, step)
    except _GONE as gone:
        # Never started, so it certainly did not run (a recovery step learns that).
        outcome = Outcome(
            step.attempt, StepContext(session, step, action), gone, action.arguments_json, False
        )
        outcome.retryable = False
        conclude_body(session, step.id, outcome, leased=True)
        session.commit()
        return None
    checkpoint = attempt.last_checkpoint(session, step.id)
    enqueued_at = step.retry_at or step.created_at
    committed = options.watched or session.get_bind().dialect.name == "sqlite"
    if committed:
        # SQLite has no row lock to keep as a lease, and one writer: the start commits here.
        started = attempt.start(session, step.id, action.id, step.attempt, options, enqueued_at)
        _started(session, action, step, started)
        _RUNNING.add(started.id)  # before its start commits: a redelivery finds it running
        if options.watched:
            step.next_sweep_at = WATCHED
            delay = (started.watched_until or clock.now()) - clock.now()
            broker.enqueue(session, broker.CHECK_ATTEMPT, started.id, delay=delay)
        session.commit()
    else:
        # The lease stays held while the body runs: the start commits on another connection.
        try:
            with db.transaction() as side:
                started = attempt.start(side, step.id, action.id, step.attempt, options, enqueued_at)
                _started(side, action, step, started)
        except IntegrityError:
            session.rollback()  # its start was recorded meanwhile: that run goes on
            return None
    return _Begun(
        step,
        action,
        options,
        started.id,
        step.attempt,
        checkpoint,
        started.started_at,
        started.deadline_at,
        committed,
    )


def _started(session: Session, action: Action, step: Step, started: attempt.Attempt) -> None:
    history.record(
        session, action, "attempt_started", step_id=step.id, attempt=started.attempt, worker=started.worker
    )


def _actor(action: Action, step: Step) -> Any:
    """The actor, afresh; None for a recovery step whose actor is gone (it learns why)."""
    try:
        return action.read_afresh()
    except ActorNotFound:
        names = action.definition.step_names()
        if names[step.definition_index] in action.definition.recovery_targets():
            return None
        raise


def _run_body(session: Session, begun: _Begun) -> None:
    step, action = begun.step, begun.action
    if begun.committed:  # a new transaction, without the lease: read them again
        session.refresh(step)
        session.refresh(action)
    context = StepContext(session, step, action)
    context.beat = heartbeat.Beat(
        attempt_id=begun.attempt_id,
        action_id=action.id,
        step_id=step.id,
        number=begun.number,
        heartbeat_timeout=begun.options.heartbeat_timeout,
        checkpoint=begun.checkpoint,
        body_session=session,
        writes_at_start=db.writes(session),
    )
    stopped: list[Cancelled] = []
    _RUNNING.add(begun.attempt_id)
    try:
        _run_and_conclude(session, begun, context, context.beat, stopped)
    finally:
        _RUNNING.discard(begun.attempt_id)


def _died(found: attempt.Attempt) -> bool:
    """Whether the worker that started ``found`` (on SQLite) is gone: not this process
    running it, nor a live process of this host (another host's is taken for dead)."""
    host, _, pid = (found.worker or "").rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return True
    if int(pid) == os.getpid():
        return found.id not in _RUNNING
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _run_and_conclude(
    session: Session, begun: _Begun, context: StepContext, beat: heartbeat.Beat, stopped: list[Cancelled]
) -> None:
    step, action = begun.step, begun.action

    def body(*args: Any) -> Any:
        try:
            return function(*args)
        except Cancelled as stop:  # the engine's own: handled whatever the configuration
            stopped.append(stop)
            return None

    try:
        function = step_function(action, step)
        actor = _actor(action, step)
    except _GONE as gone:
        outcome = Outcome(begun.number, context, gone, action.arguments_json, False, retryable=False)
    else:
        outcome = run_body(session, step, action, context, body, actor)
    if stopped:
        outcome.error, outcome.wrote, outcome.after_commit = stopped[0], False, []
    _conclude(session, begun, outcome, beat)


def _conclude(session: Session, begun: _Begun, outcome: Outcome, beat: heartbeat.Beat) -> None:
    """Record the outcome if the step is still at this attempt and the attempt open;
    otherwise roll the body's writes back and drop it. A body that returns after its
    attempt_timeout timed out, whether or not the watch saw it first."""
    late = begun.deadline_at is not None and clock.now() > begun.deadline_at
    failed = outcome.error is not None or late
    # The checkpoints a failed body reported once it wrote count writes rolled back here.
    checkpoint = None if failed and heartbeat.body_wrote(beat) else beat.pending.get("checkpoint")
    if failed:
        session.rollback()  # a failed attempt's writes do not stand
    db.lock_for_write(session)
    row = session.execute(lease.LOCK, {"step_id": begun.step.id}).one_or_none()
    step, action = row if row is not None else (None, None)
    current = (
        step is not None
        and action is not None
        and step.attempt == begun.number
        and step.performed_at is None
        and step.status == status.STEP_PERFORMING
        and action.status == status.PERFORMING
    )
    ended = attempt.SUCCEEDED if outcome.error is None else attempt.FAILED
    pending = beat.pending
    if late and current:
        assert step is not None and action is not None and begun.deadline_at is not None
        error = _timed_out(step, action, begun.number, begun.deadline_at - begun.started_at)
        if attempt.close(session, begun.attempt_id, attempt.TIMED_OUT, error, checkpoint):
            counter.count(session, {"stepwise_attempt_timeouts_total": 1})
            _failed(session, step, action, error)
            session.commit()
            return
    if not current or not attempt.close(
        session, begun.attempt_id, ended, outcome.error, checkpoint, pending.get("progress")
    ):
        session.rollback()
        _discard(session, begun)
        return
    assert step is not None
    if begun.options.watched:
        step.next_sweep_at = None
    conclude_body(session, step.id, outcome, leased=True)
    session.commit()


def _discard(session: Session, begun: _Begun) -> None:
    """A body that concluded too late (its action completed, its attempt closed): its
    attempt ends as discarded, and its step closes if its action completed meanwhile."""
    db.lock_for_write(session)
    row = session.execute(lease.LOCK, {"step_id": begun.step.id}).one_or_none()
    if row is not None and row[1].status != status.PERFORMING:
        close_unperformed(row[0])
    attempt.close(session, begun.attempt_id, attempt.DISCARDED)
    session.commit()


def _lost(session: Session, step: Step, action: Action, found: attempt.Attempt) -> None:
    error = AttemptLost(
        f"attempt {found.attempt} of step {step.id} (action {action.id}, {action.name}) started at "
        f"{found.started_at:%Y-%m-%d %H:%M:%S} on {found.worker} and never concluded: its worker died "
        f"while the body ran"
    )
    attempt.close(session, found.id, attempt.LOST, error)
    _failed(session, step, action, error)


def _failed(session: Session, step: Step, action: Action, error: BaseException) -> None:
    """A failed attempt the engine found (lost, timed out): the retry policy decides."""
    step.next_sweep_at = None
    outcome = Outcome(step.attempt, StepContext(session, step, action), error, action.arguments_json, False)
    conclude_body(session, step.id, outcome, leased=True)


def check(session: Session, attempt_id: int) -> timedelta | None:
    """The watch: close the attempt if its heartbeat or its time is up, and follow the
    retry policy (the next attempt, or the step fails); how long until it is due if early."""
    found = session.get(attempt.Attempt, attempt_id, populate_existing=True)
    if found is None or found.ended_at is not None or found.watched_until is None:
        return None
    now = clock.now()
    if found.watched_until > now:
        return found.watched_until - now + timedelta(milliseconds=1)
    db.lock_for_write(session)
    row = session.execute(lease.LOCK, {"step_id": found.step_id}).one_or_none()  # steps before attempts
    found = session.get(attempt.Attempt, attempt_id, populate_existing=True, with_for_update=True)
    if found is None or found.ended_at is not None or found.watched_until is None:
        return None
    if found.watched_until > now:  # a heartbeat came meanwhile
        return found.watched_until - now + timedelta(milliseconds=1)
    step, action = row if row is not None else (None, None)
    if (
        step is None
        or action is None
        or step.attempt != found.attempt
        or step.performed_at is not None
        or step.status != status.STEP_PERFORMING
        or action.status != status.PERFORMING
    ):
        attempt.close(session, found.id, attempt.DISCARDED)
        return None
    name = _step_name(action, step)
    error: AttemptTimedOut
    if found.deadline_at is not None and found.deadline_at <= now:
        error = _timed_out(step, action, found.attempt, found.deadline_at - found.started_at)
        attempt.close(session, found.id, attempt.TIMED_OUT, error)
        counter.count(session, {"stepwise_attempt_timeouts_total": 1})
    else:
        since = found.heartbeat_at or found.started_at
        error = HeartbeatTimedOut(
            f"attempt {found.attempt} of step {name!r} of action {action.id} ({action.name}) sent no "
            f"heartbeat since {since:%Y-%m-%d %H:%M:%S} (worker {found.worker}): considered lost; "
            f"the next attempt starts from its last checkpoint",
            found.attempt,
        )
        attempt.close(session, found.id, attempt.LOST, error)
        counter.count(session, {"stepwise_heartbeat_timeouts_total": 1})
    log.warning("stepwise: %s", error)
    _failed(session, step, action, error)
    return None


def _timed_out(step: Step, action: Action, number: int, limit: timedelta) -> AttemptTimedOut:
    return AttemptTimedOut(
        f"attempt {number} of step {_step_name(action, step)!r} of action {action.id} ({action.name}) "
        f"ran longer than its attempt_timeout ({limit.total_seconds():g} s); it counts as failed",
        number,
    )


def _step_name(action: Action, step: Step) -> str:
    try:
        names = action.definition.step_names()
    except _GONE:
        return f"#{step.definition_index + 1}"
    return (
        names[step.definition_index]
        if step.definition_index < len(names)
        else f"#{step.definition_index + 1}"
    )
