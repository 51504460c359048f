"""Skip: an operator completes a failed (or timed-out) leaf as succeeded, with a note, so
that the steps waiting on it carry on as if it had succeeded.

Only a leaf: an action that failed by itself, not because an action below it failed (skip
that one instead). The diagram has no edge from failed to succeeded, so a skip takes the
two it has: the action goes back to pending, outside any lane (it performs nothing), and
completes as succeeded at once; its waiters reopen in between, as a retry reopens them,
and then conclude with it. Its failed step stays failed and its error stays on the row: the
history says it was skipped, and no achievement is granted for work that was not done.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from .. import achievement, audit, compensating, history, performance, status
from ..action import Action, write_status
from ..completing import complete_action
from ..completion import forward
from ..invocation import Invocation
from ..step import Step
from .result import CommandResult, run
from .retry import reopen_up

#: Statuses a skip applies to: the action failed.
SKIPPABLE: frozenset[str] = frozenset({status.FAILED, status.TIMED_OUT})


def skip(
    action_id: int,
    *,
    by: str | None = None,
    note: str | None = None,
    cause: str = history.OPERATOR,
    session: Session | None = None,
) -> CommandResult:
    """Complete the failed leaf ``action_id`` as succeeded; its parents carry on. Refused
    with ``not_failed`` (it did not fail) or ``not_a_leaf`` (an action below it failed:
    the result's ``action_id`` names it)."""

    def work(s: Session) -> CommandResult:
        action = s.get(Action, action_id, populate_existing=True)
        below = None
        if action is None:
            result = CommandResult(False, "not_found", action_id)
        elif action.status == status.COMPENSATING:
            result = skip_compensation(s, action, cause=cause, by=by, note=note)
            below = result.action_id if result.reason == "not_a_leaf" else None
        elif action.status not in SKIPPABLE:
            result = CommandResult(False, "not_failed", action_id)
        elif (below := unsuccessful_child(s, action)) is not None:
            result = CommandResult(False, "not_a_leaf", below)
        elif skip_leaf(s, action, cause=cause, by=by, note=note):
            result = CommandResult(True, "skipped", action_id)
        else:
            result = CommandResult(False, "not_failed", action_id)
        data = {"failed_child": below} if below is not None else {}
        audit.record(
            s, "skip", f"action:{action_id}", cause=cause, by=by, reason=note, result=result.reason, **data
        )
        return result

    return run(session, work)


def skip_compensation(
    session: Session, action: Action, *, cause: str, by: str | None, note: str | None
) -> CommandResult:
    """A compensating action's skip completes its failed compensation by hand when that
    never became an action; one that did is skipped itself (``not_a_leaf`` names it)."""
    row = compensating.failed(session, action)
    if row is None:
        return CommandResult(False, "not_failed", action.id)
    child = compensating.action_of(session, row)
    if child is not None:
        return CommandResult(False, "not_a_leaf", child.id)
    lane = performance.lock(session, action.concurrency_key)
    session.refresh(row)
    if row.status != status.COMPENSATION_FAILED:  # retried or skipped meanwhile
        return CommandResult(False, "not_failed", action.id)
    ends_as = compensating.skip(session, action, row, cause=cause, by=by, note=note)
    if ends_as is not None:
        forward(
            session, lane, action, ends_as, note="compensated", only_from=frozenset({status.COMPENSATING})
        )
    return CommandResult(True, "skipped", action.id)


def unsuccessful_child(session: Session, action: Action) -> int | None:
    """An action below ``action`` (in any of its steps) that did not succeed, if any."""
    return session.scalar(
        select(Invocation.action_id)
        .join(Step, Step.id == Invocation.parent_step_id)
        .join(Action, Action.id == Invocation.action_id)
        .where(Step.action_id == action.id, Action.status != status.SUCCEEDED)
        .order_by(Invocation.action_id)
        .limit(1)
    )


def skip_leaf(session: Session, action: Action, *, cause: str, by: str | None, note: str | None) -> bool:
    """Skip ``action``; False (nothing changed) when another transaction moved it first."""
    was = action.status
    # One guarded UPDATE first: of a skip and a retry sent at once, only one reopens it.
    if not write_status(
        session,
        action,
        status.PENDING,
        completed_at=None,
        after_callbacks_succeeded_count=None,
        after_callbacks_failed_count=None,
    ):
        return False
    data: dict[str, Any] = {"note": note} if note else {}
    history.record(session, action, "skipped", cause=cause, by=by, was=was, **data)
    # Its waiters reopen before it completes: a reopened parent step must be waiting on it
    # when it concludes.
    reopen_up(session, action, cause=cause, by=by)
    session.flush()
    complete_action(session, action, status.SUCCEEDED, cause=cause, by=by, note=note or "skipped")
    if action.checksum:
        # Its work was not done: what the key stands for stays unknown.
        achievement.erase(session, action.checksum_key)
    return True
