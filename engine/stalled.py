"""Stalled work: what the sweeper gave up on after ``sweeper.MAX_RESENDS`` re-sends fails
visibly, with a ``Stalled`` error naming it, instead of being sent forever (invariant 4).

Each give-up runs in its own transaction after the sweep's, takes its locks in the usual
order (an invocation first, as its admission does; then lanes before steps before
actions), skips work a live worker holds (its lease) and changes nothing when the work
made progress meanwhile.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from . import clock, history, performance, status
from .action import Action, error_class, error_data
from .admission import fail_unadmitted
from .completing import complete_action
from .completion import conclude
from .errors import Stalled
from .invocation import Invocation
from .step import Step


def last_error(row: Invocation | Action) -> str:
    return f" (last error: {row.error_class}: {row.error_message})" if row.error_class else ""


def admission(invocation: Invocation) -> Stalled:
    """The error of an invocation never admitted."""
    return Stalled(
        f"invocation {invocation.id} ({invocation.name} on {invocation.actor_type}/"
        f"{invocation.actor_id}) was sent again {invocation.resend_count} times by the sweeper and "
        f"never admitted{last_error(invocation)}. It fails instead of being sent forever: fix the "
        "cause (a key, checksum or timeout callable, a definition a deploy removed), then retry "
        "the action above it, or invoke it again"
    )


def in_action(work: str, action: Action, resends: int, never: str) -> Stalled:
    """The error of ``work`` of ``action`` (a step, a wait, its timeout), which ``never``."""
    return Stalled(
        f"{work} of action {action.id} ({action.name} on {action.actor_type}/{action.actor_id}) was "
        f"sent again {resends} times by the sweeper and {never}{last_error(action)}. The action "
        f"fails instead of being sent forever: fix the cause, then retry it (`stepwise retry "
        f"{action.id}`, or from the studio)"
    )


def completion(request: Invocation) -> Stalled:
    """The error of a ``complete_later`` request never carried out."""
    target = f"action {request.action_id}" if request.action_id else "the current action"
    return Stalled(
        f"completion {request.id} of {target} ({request.name} on {request.actor_type}/"
        f"{request.actor_id}, as {request.arguments_json[0]}) was sent again {request.resend_count} "
        f"times by the sweeper and never carried out. It fails, and the action is left as it is: "
        f"complete it again (`stepwise complete ID STATUS`, or from the studio)"
    )


def _store(invocation: Invocation, error: Stalled) -> None:
    invocation.error_class = error_class(error)
    invocation.error_message = str(error)[:2000]


def _locked_invocation(session: Session, invocation_id: int) -> Invocation | None:
    """The invocation, unless a live worker holds it (its lease: it is being admitted)."""
    return session.scalars(
        select(Invocation)
        .where(Invocation.id == invocation_id)
        .with_for_update(skip_locked=True)
        .execution_options(populate_existing=True)
    ).one_or_none()


def fail_admission(session: Session, error: Stalled, *, invocation_id: int) -> bool:
    """The invocation ends failed, never admitted; its parent step concludes unsuccessfully."""
    invocation = _locked_invocation(session, invocation_id)
    if invocation is None or invocation.settled_at is not None:
        return False
    fail_unadmitted(session, invocation, error, cause=history.SWEEPER)
    return True


def fail_completion(session: Session, error: Stalled, *, request_id: int) -> bool:
    """The request is settled as failed; its action is left as it is, to be completed
    another way (or to time out)."""
    request = _locked_invocation(session, request_id)
    if request is None or request.settled_at is not None:
        return False
    request.settled_at, request.outcome = clock.now(), "failed"
    _store(request, error)
    action = session.get(Action, request.action_id) if request.action_id else None
    history.record(
        session,
        action,
        "completion_failed",
        cause=history.SWEEPER,
        invocation_id=request.id,
        **error_data(error),
    )
    return True


def fail_wait(session: Session, error: Stalled, *, wait_id: int) -> bool:
    """The action fails, and the wait concludes unsuccessfully, so its step is not left
    waiting (invariant 3)."""
    wait = _locked_invocation(session, wait_id)
    if wait is None or wait.concluded_at is not None or wait.parent_step_id is None:
        return False
    step = session.get(Step, wait.parent_step_id)
    assert step is not None
    fail_action(session, error, action_id=step.action_id)
    wait.concluded_at = wait.settled_at = clock.now()
    wait.outcome, wait.succeeded = "failed", False
    _store(wait, error)
    session.flush()
    conclude(session, wait.parent_step_id, False)
    return True


def fail_action(
    session: Session,
    error: Stalled,
    *,
    action_id: int,
    step_id: int | None = None,
    unperformed: bool = False,
    unsent_job: bool = False,
) -> bool:
    """Fail the action, under its lane's lock; with ``step_id``, only while no live worker
    holds that step (its lease), with ``unperformed`` while its body has not run, and with
    ``unsent_job`` while its job's send is not confirmed."""
    action = session.get(Action, action_id, populate_existing=True)
    if action is None or action.status not in status.INCOMPLETE:
        return False
    performance.lock(session, action.concurrency_key)  # lanes before steps: one lock order
    if step_id is not None:
        step = session.scalars(
            select(Step)
            .where(Step.id == step_id)
            .with_for_update(skip_locked=True)
            .execution_options(populate_existing=True)
        ).one_or_none()
        if step is None or (unperformed and step.performed_at is not None):
            return False
        if step.leased_until is not None and step.leased_until > clock.now():
            return False  # a live worker claimed it (engine/claiming.py)
        if unsent_job and step.job_sent_at is not None:
            return False
    completion = complete_action(session, action, status.FAILED, cause=history.SWEEPER, error=error)
    return completion.completed
