"""Retry: reopen a failed, timed-out or cancelled action where it stopped.

Steps that succeeded are kept and no succeeded work runs again: a step whose body failed
runs again, with its retry policy's whole budget (``RetryPolicy.next_run``); a step failed
by its children retries the failed ones, down to the leaves; and ancestors that failed
because of this action reopen and carry on when it succeeds.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from .. import audit, broker, compensating, history, status
from ..action import Action, write_status
from ..compensation import STEP_INDEX, undone
from ..completion import perform
from ..errors import ActorNotFound, UnknownAction
from ..invocation import Invocation
from ..performance import Performance, lock, set_current
from ..step import Step
from .result import CommandResult, run


def retry(
    action_id: int,
    *,
    by: str | None = None,
    reason: str | None = None,
    timeout: timedelta | None = None,
    cause: str = history.OPERATOR,
    session: Session | None = None,
    audited: bool = True,
) -> CommandResult:
    """Reopen ``action_id`` (failed, timed out or cancelled); ``timeout`` replaces its timeout."""

    def work(s: Session) -> CommandResult:
        action = s.get(Action, action_id, populate_existing=True)
        if action is None:
            result = CommandResult(False, "not_found", action_id)
        elif action.status == status.COMPENSATING:
            result = retry_compensation(s, action, cause=cause, by=by, reason=reason)
        elif action.status not in status.RETRYABLE:
            result = CommandResult(False, "not_retryable", action_id)
        elif undone(s, action):
            result = CommandResult(False, "compensated", action_id)  # its work was undone
        elif (below := compensated_below(s, action)) is not None:
            result = CommandResult(False, "compensated", below)  # it would reopen that one
        else:
            if timeout is not None:
                action.timeout_seconds = timeout.total_seconds()
            reopen_down(s, action, cause=cause, by=by)
            reopen(s, action, cause=cause, by=by, reason=reason)
            reopen_up(s, action, cause=cause, by=by)
            result = CommandResult(True, "retried", action_id)
        if audited:
            data = {"timeout_seconds": int(timeout.total_seconds())} if timeout else {}
            audit.record(
                s,
                "retry",
                f"action:{action_id}",
                cause=cause,
                by=by,
                reason=reason,
                result=result.reason,
                **data,
            )
        return result

    return run(session, work)


def retry_compensation(
    session: Session, action: Action, *, cause: str, by: str | None, reason: str | None
) -> CommandResult:
    """A compensating action's retry retries its failed compensation: the compensating
    action (as if retried itself), or, when it never became one (or compensated, its
    completed steps undone), the compensation afresh.
    Refused (``compensating``) while no compensation failed."""
    row = compensating.failed(session, action)
    if row is None:
        return CommandResult(False, "compensating", action.id)
    child = compensating.action_of(session, row)
    if (
        child is not None
        and child.status in status.RETRYABLE
        and not undone(session, child)  # compensated itself: it runs afresh instead
        and compensated_below(session, child) is None
    ):
        reopen_down(session, child, cause=cause, by=by)
        reopen(
            session, child, cause=cause, by=by, reason=reason or f"retrying action {action.id}'s compensation"
        )
        reopen_up(session, child, cause=cause, by=by)
    else:
        lock(session, action.concurrency_key)  # as a concluding compensation would: one at a time
        session.refresh(row)
        if row.status != status.COMPENSATION_FAILED:  # retried or skipped meanwhile
            return CommandResult(False, "compensating", action.id)
        compensating.restart(session, action, row, cause=cause, by=by)
    return CommandResult(True, "retried", action.id)


def current_step(session: Session, action: Action) -> Step | None:
    return session.scalars(
        select(Step)
        .where(Step.action_id == action.id, Step.definition_index == action.current_step_index)
        .order_by(Step.visit.desc())
        .limit(1)
        .execution_options(populate_existing=True)
    ).one_or_none()


def next_run(action: Action, attempt: int) -> int:
    """The first attempt of the step's next run of retries: the policy's budget afresh."""
    try:
        return action.definition.retry.next_run(attempt)
    except (ActorNotFound, UnknownAction):  # removed by a deploy: the attempt fails anyway
        return attempt + 1


def compensated_below(session: Session, action: Action) -> int | None:
    """A failed action that ``reopen_down`` would reopen below ``action`` and that was
    compensated (its completed steps undone, so it must not carry on), if any."""
    step = current_step(session, action)
    if step is None or step.status != status.STEP_FAILED:
        return None
    children = session.scalars(
        select(Action)
        .join(Invocation, Invocation.action_id == Action.id)
        .where(Invocation.parent_step_id == step.id, Invocation.succeeded.is_(False))
        .order_by(Action.id)
    ).all()
    for child in children:
        if child.status in status.RETRYABLE:
            if undone(session, child):
                return child.id
            if (below := compensated_below(session, child)) is not None:
                return below
    return None


def reopen_down(session: Session, action: Action, *, cause: str, by: str | None) -> None:
    """Make the action's current step runnable again: retry its failed children, or run
    its body again when the body itself failed."""
    step = current_step(session, action)
    if step is None or step.status != status.STEP_FAILED:
        return
    failed = session.scalars(
        select(Invocation).where(Invocation.parent_step_id == step.id, Invocation.succeeded.is_(False))
    ).all()
    if not failed:
        step.performed_at = step.leased_until = None
        step.attempt = next_run(action, step.attempt)
        step.retry_at = None
        step.pending_actions_count = 0
        step.unsuccessful_actions_count = 0
    for invocation in failed:
        child = session.get(Action, invocation.action_id) if invocation.action_id else None
        invocation.concluded_at = None
        invocation.succeeded = None
        if child is None:
            # Never admitted (its before hook failed, it deadlocked…): admit it again.
            invocation.settled_at = None
            invocation.outcome = None
            invocation.error_class = invocation.error_message = None
            invocation.resend_count, invocation.next_sweep_at = 0, None
            broker.enqueue(session, broker.ADMIT, invocation.id)
        elif child.status in status.RETRYABLE:
            reopen_down(session, child, cause=cause, by=by)
            reopen(session, child, cause=cause, by=by, reason="its ancestor was retried")
    step.pending_actions_count += len(failed)
    step.unsuccessful_actions_count = max(0, step.unsuccessful_actions_count - len(failed))
    step.status = status.STEP_PERFORMING
    step.completed_at = None
    # The attempt of a body that runs again: where the action page's attempts start.
    again: dict[str, Any] = {} if failed else {"attempt": step.attempt}
    history.record(
        session, action, "step_reopened", cause=cause, by=by, step_id=step.id, retried=len(failed), **again
    )
    session.flush()


def reopen(session: Session, action: Action, *, cause: str, by: str | None, reason: str | None) -> None:
    """Back to pending in its lane; it performs at once if the lane is free."""
    session.flush()
    # The new run's after-callbacks are counted afresh: a callback that failed last time
    # must not make this run unsuccessful. So are the sweeper's re-sends, which it may have
    # given up on.
    write_status(
        session,
        action,
        status.PENDING,
        completed_at=None,
        after_callbacks_succeeded_count=None,
        after_callbacks_failed_count=None,
        resend_count=0,
        next_sweep_at=None,
    )
    session.execute(
        update(Step).where(Step.action_id == action.id).values(resend_count=0, next_sweep_at=None)
    )
    history.record(session, action, "retried", cause=cause, by=by, reason=reason)
    lane = lock(session, action.concurrency_key)
    if lane is None:
        lane = Performance(concurrency_key=action.concurrency_key, action_id=action.id)
        session.add(lane)
        session.flush()
        set_current(lane, action)
        session.flush()
        perform(session, action, cause=cause)
    else:
        session.flush()


def reopen_up(session: Session, action: Action, *, cause: str, by: str | None) -> None:
    """Ancestors whose steps failed because this action failed wait on it again."""
    waiters = session.scalars(
        select(Invocation).where(Invocation.action_id == action.id, Invocation.succeeded.is_(False))
    ).all()
    for invocation in waiters:
        if invocation.parent_step_id is None:
            continue
        step = session.get(Step, invocation.parent_step_id, populate_existing=True)
        assert step is not None
        invocation.concluded_at = None
        invocation.succeeded = None
        step.pending_actions_count += 1
        step.unsuccessful_actions_count = max(0, step.unsuccessful_actions_count - 1)
        parent = session.get(Action, step.action_id, populate_existing=True)
        assert parent is not None
        if step.status == status.STEP_FAILED:
            step.status = status.STEP_PERFORMING
            step.completed_at = None
            history.record(session, parent, "step_reopened", cause=cause, by=by, step_id=step.id, retried=1)
            if step.definition_index == STEP_INDEX:  # a failed compensation runs again
                compensating.resumed(session, parent, step, cause=cause, by=by)
        session.flush()
        if (
            parent is not None
            and parent.status in status.RETRYABLE
            and parent.current_step_index == step.definition_index
            and not undone(session, parent)  # compensated: what it did was undone
        ):
            reopen(session, parent, cause=cause, by=by, reason=f"its child action {action.id} was retried")
            reopen_up(session, parent, cause=cause, by=by)
