"""Step bodies: running a step's user code once, recording its children or its failure,
retrying it by policy, and sending ready bodies to workers.

A body runs in its own transaction holding its step's row lock (its lease); a redelivered
message finds ``performed_at`` set and does nothing.
"""

from __future__ import annotations

from functools import partial

from sqlalchemy import bindparam, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from . import broker, clock, db, history, status
from .action import Action, error_data
from .completion import complete_step
from .config import run_user_code
from .step import Step
from .step_context import StepContext


def dispatch_ready(session: Session) -> None:
    """Send the bodies of the steps this session opened to the workers, instead of running
    them here (operator commands run in web requests and CLIs)."""
    queue = broker.ready(session)
    while queue:
        broker.send(broker.PERFORM_STEP, queue.pop(0))


def run_ready(session: Session) -> None:
    """Run the bodies of the steps this session opened, each in its own transaction,
    until none is left (a body may complete its action and open the next one's step)."""
    queue = broker.ready(session)
    while queue:
        step_id = queue.pop(0)
        try:
            db.retrying(session, partial(perform, session, step_id))
        except Exception as error:
            # Unhandled: it propagates to the worker (which may retry the message), but the
            # action row keeps what happened (invariant 8).
            db.retrying(session, partial(record_unhandled, session, step_id, error))
            raise


def record_unhandled(session: Session, step_id: int, error: BaseException) -> None:
    step = session.get(Step, step_id)
    action = session.get(Action, step.action_id) if step is not None else None
    if action is not None:
        action.record_error(error)
        history.record(session, action, "step_errored", step_id=step_id, **error_data(error))


#: A step with its action, holding the step's row lock: the body's lease while it runs.
_LOCK = (
    select(Step, Action)
    .join(Action, Action.id == Step.action_id)
    .where(Step.id == bindparam("step_id"))
    .with_for_update(of=Step)
    .execution_options(populate_existing=True)
)


def perform(session: Session, step_id: int, failure: BaseException | None = None) -> None:
    """Run a step's body once; record its children and waits, or its failure."""
    row = session.execute(_LOCK, {"step_id": step_id}).one_or_none()
    if row is None:
        return
    step, action = row
    if step.performed_at is not None or step.status != status.STEP_PERFORMING:
        return  # a redelivered message: the body already ran
    if action.status != status.PERFORMING:
        return  # completed meanwhile (cancelled, timed out, completed from outside)
    if step.retry_at is not None and step.retry_at > clock.now():
        return  # early: the message for this attempt is delayed until retry_at
    error = failure
    context = StepContext(session, step, action)
    if error is None:
        body = action.definition.all_steps()[step.definition_index]
        error = run_user_code(body, action.actor, context, *list(action.arguments))
        if error is not None and (
            isinstance(error, SQLAlchemyError) or action.definition.retry.retries(error, step.attempt)
        ):
            # Record the failure in a fresh transaction: the attempt's own changes are
            # rolled back (a retried body runs again in full), and a database error has
            # left this transaction unusable anyway.
            session.rollback()
            return perform(session, step_id, failure=error)
    if error is not None and action.definition.retry.retries(error, step.attempt):
        return schedule_retry(session, step, action, error)
    if error is None:
        context._record()  # first: the step's own changes below go out in one UPDATE
        action.store_arguments()
    step.performed_at = clock.now()
    step.retry_at = None
    if error is not None:
        step.pending_actions_count = 0
        step.status = status.STEP_FAILED
        action.record_error(error)
        history.record(session, action, "step_failed", step_id=step.id, **error_data(error))
    if step.pending_actions_count == 0:
        complete_step(session, step, action)


def schedule_retry(session: Session, step: Step, action: Action, error: BaseException) -> None:
    """Record a failed attempt and send the next one, due after the policy's interval."""
    interval = action.definition.retry.interval(step.attempt)
    step.retry_at = clock.now() + interval
    action.record_error(error)
    history.record(
        session,
        action,
        "attempt_failed",
        step_id=step.id,
        attempt=step.attempt,
        next_attempt_at=step.retry_at.isoformat(),
        **error_data(error),
    )
    step.attempt += 1
    broker.enqueue(session, broker.PERFORM_STEP, step.id, delay=interval)


def resume(session: Session, action_id: int) -> None:
    """Queue the current step of a performing action if its body has not run yet."""

    pending = session.scalars(
        select(Step.id)
        .join(Action, Action.id == Step.action_id)
        .where(
            Step.action_id == action_id,
            Step.definition_index == Action.current_step_index,
            Step.performed_at.is_(None),
            Step.status == status.STEP_PERFORMING,
            Action.status == status.PERFORMING,
        )
    ).first()
    if pending is not None:
        broker.ready(session).append(pending)
