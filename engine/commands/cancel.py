"""Cancel: an action and, below it, its pending and performing descendants.

Stepped only propagates upward; here cancellation also goes down the tree, frees the
descendants' lanes and settles their pending timers, so nothing is left running for a
tree nobody waits on. Work shared with another tree (by reuse) is detached, not cancelled.
An action with compensations compensates (engine/compensating.py), from the leaves up: a
compensating child stays attached, and its parent's compensations wait for it.
"""

from __future__ import annotations

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from .. import audit, clock, history, status
from ..action import Action
from ..compensation import STEP_INDEX
from ..completing import complete_action
from ..completion import conclude
from ..invocation import Invocation
from ..step import Step
from .result import CommandResult, run


def cancel(
    action_id: int,
    *,
    by: str | None = None,
    reason: str | None = None,
    cause: str = history.OPERATOR,
    session: Session | None = None,
    audited: bool = True,
) -> CommandResult:
    """Cancel a pending or performing action and its descendants."""

    def work(s: Session) -> CommandResult:
        action = s.get(Action, action_id, populate_existing=True)
        if action is None:
            result = CommandResult(False, "not_found", action_id)
        elif action.status == status.COMPENSATING:
            result = CommandResult(False, "compensating", action_id)  # it undoes its work to the end
        elif action.status not in status.INCOMPLETE:
            result = CommandResult(False, "already_completed", action_id)
        else:
            cancel_tree(s, action, cause=cause, by=by, reason=reason)
            result = CommandResult(True, "cancelled", action_id)
        if audited:
            audit.record(
                s, "cancel", f"action:{action_id}", cause=cause, by=by, reason=reason, result=result.reason
            )
        return result

    return run(session, work)


def cancel_tree(session: Session, action: Action, *, cause: str, by: str | None, reason: str | None) -> None:
    complete_action(session, action, status.CANCELLED, cause=cause, by=by, note=reason)
    open_steps = session.scalars(
        # Not its compensations' steps: a compensating action runs them to the end.
        select(Step.id).where(
            Step.action_id == action.id, Step.completed_at.is_(None), Step.definition_index != STEP_INDEX
        )
    ).all()
    for step_id in open_steps:
        waiting = session.scalars(
            select(Invocation).where(Invocation.parent_step_id == step_id, Invocation.concluded_at.is_(None))
        ).all()
        for invocation in waiting:
            child = session.get(Action, invocation.action_id) if invocation.action_id else None
            if (
                child is not None
                and child.status in status.INCOMPLETE
                and not shared(session, child, step_id)
            ):
                cancel_tree(session, child, cause=cause, by=by, reason=reason)
            if child is not None and child.status == status.COMPENSATING:
                continue  # its parent waits until it has compensated: leaves first
            detach(session, invocation.id)


def shared(session: Session, child: Action, step_id: int) -> bool:
    """Whether a step outside the cancelled tree also waits on ``child``."""
    other = session.scalar(
        select(Invocation.id)
        .where(
            Invocation.action_id == child.id,
            Invocation.concluded_at.is_(None),
            Invocation.parent_step_id.is_not(None),
            Invocation.parent_step_id != step_id,
        )
        .limit(1)
    )
    return other is not None


def detach(session: Session, invocation_id: int) -> None:
    """Conclude one waited-on invocation unsuccessfully, once: an unadmitted invocation, a
    wait (its timer then does nothing) or a child that others still need."""
    now = clock.now()
    row = session.execute(
        update(Invocation)
        .where(Invocation.id == invocation_id, Invocation.concluded_at.is_(None))
        .values(
            concluded_at=now,
            succeeded=False,
            settled_at=func.coalesce(Invocation.settled_at, now),
            outcome=func.coalesce(Invocation.outcome, "cancelled"),
        )
        .returning(Invocation.parent_step_id)
        .execution_options(synchronize_session=False)
    ).first()
    if row is not None and row[0] is not None:
        conclude(session, row[0], False)
