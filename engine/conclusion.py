"""Conclusion: recording what a step body's run came to, once.

A body's ``Outcome`` is recorded under its step's lock (engine/lease.py): its children and
waits, its failure or its retry by policy, and the step's completion when nothing is left
to wait for, which moves its action on (engine/completion.py). A group-commit batch
concludes the bodies of many steps together (engine/batch_conclusion.py); what is not the
common case there comes here, one step at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from . import broker, clock, db, history, lease, status
from .action import Action, error_data
from .completion import complete_step
from .step import Step
from .step_context import StepContext


@dataclass
class Outcome:
    """What one run of a step body came to, to be recorded by ``conclude_body``."""

    attempt: int
    context: StepContext
    error: BaseException | None
    #: The arguments as the body left them (a body may change them in place).
    arguments_json: list[Any]
    #: Whether the body wrote to the database (then its outcome commits with its writes).
    wrote: bool
    #: Messages the body asked for after commit (a job-backed action's job).
    after_commit: list[Callable[[], Any]] = field(default_factory=list)
    #: False when no attempt can succeed (the definition or the actor is gone): not retried.
    retryable: bool = True
    #: What the body returned, in its stored (JSON) form.
    result_json: Any = None


def conclude_body(session: Session, step_id: int, outcome: Outcome, *, leased: bool = False) -> None:
    """Record a body's outcome, once: its children and waits, its failure or its retry,
    and complete the step when nothing is left to wait for."""
    context = outcome.context
    if leased:  # the body ran in this transaction, which still holds the step's lease
        step, action = context.step, context.action
        if session.get_bind().dialect.name == "sqlite":
            # No row lock there: read the step again under the write lock.
            db.lock_for_write(session)
            session.refresh(step)
    else:
        row = session.execute(lease.LOCK, {"step_id": step_id}).one_or_none()
        if row is None:
            return
        step, action = row
    if step.performed_at is not None or step.attempt != outcome.attempt:
        return  # recorded already (a body run twice by a redelivery records once)
    error = outcome.error
    for callback in outcome.after_commit:
        broker.after_commit(session, callback)
    if error is not None and outcome.retryable and action.definition.retry.retries(error, step.attempt):
        return schedule_retry(session, step, action, error)
    if error is None:
        context.rebind(session, step, action)
        context._record()  # first: the step's own changes below go out in one UPDATE
        step.result, step.decision = outcome.result_json, context.decision
        if outcome.arguments_json != action.arguments_json:
            action.arguments_json = outcome.arguments_json
            action.__dict__.pop("_arguments", None)
    step.performed_at = clock.now()
    step.retry_at = step.leased_until = None  # the body's claim ends with its outcome
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
    step.resend_count, step.next_sweep_at = 0, None  # progress: the sweeper counts afresh
    step.leased_until = None  # the next attempt is claimed afresh (engine/claiming.py)
    broker.enqueue(session, broker.PERFORM_STEP, step.id, delay=interval)
