"""Completing outbound actions by hand or by webhook (approve, reject, complete), and
forgetting an achievement so that the next invocation runs."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from .. import achievement, audit, db, history, inbox, status
from ..action import Action
from ..completing import complete_action
from .result import CommandResult, run
from .signal import signal


def complete(
    action_id: int,
    to: str = status.SUCCEEDED,
    *,
    by: str | None = None,
    note: str | None = None,
    payload: dict[str, Any] | None = None,
    cause: str = history.OPERATOR,
    command: str = "complete",
    session: Session | None = None,
) -> CommandResult:
    """Complete an outbound action with ``to`` (succeeded, failed, cancelled, timed_out),
    an optional note and a JSON payload stored as the action's ``result``. A second
    completion changes nothing and says ``already_completed``."""
    if to not in status.COMPLETIONS:
        raise ValueError(f"complete with one of {sorted(status.COMPLETIONS)}, not {to!r}")

    def work(s: Session) -> CommandResult:
        action = s.get(Action, action_id, populate_existing=True)
        if action is None:
            result = CommandResult(False, "not_found", action_id)
        elif not action.outbound:
            result = CommandResult(False, "not_outbound", action_id)
        else:
            completion = complete_action(s, action, to, cause=cause, by=by, note=note)
            if completion and payload is not None:
                action.result = payload
            result = CommandResult(completion.completed, completion.reason, action_id)
        data: dict[str, Any] = {"status": to}
        if payload is not None:
            data["payload"] = payload
        audit.record(
            s, command, f"action:{action_id}", cause=cause, by=by, reason=note, result=result.reason, **data
        )
        return result

    return run(session, work)


def approve(
    action_id: int, *, by: str | None = None, note: str | None = None, **options: Any
) -> CommandResult:
    """Approve: send "approved" to an action whose step waits for an approval
    (``step.wait_for_approval``), else complete an outbound action as succeeded."""
    if _waits_for(action_id, inbox.APPROVED, options.get("session")):
        return signal(action_id, inbox.APPROVED, options.get("payload"), by=by, note=note, command="approve")
    return complete(action_id, status.SUCCEEDED, by=by, note=note, command="approve", **options)


def reject(
    action_id: int, *, by: str | None = None, note: str | None = None, **options: Any
) -> CommandResult:
    """Reject: send "rejected" to an action whose step waits for it, else complete an
    outbound action as failed."""
    if _waits_for(action_id, inbox.REJECTED, options.get("session")):
        return signal(action_id, inbox.REJECTED, options.get("payload"), by=by, note=note, command="reject")
    return complete(action_id, status.FAILED, by=by, note=note, command="reject", **options)


def _waits_for(action_id: int, name: str, session: Session | None) -> bool:
    if session is not None:
        return name in inbox.waited_for(session, action_id)
    with db.session() as own:
        return name in inbox.waited_for(own, action_id)


def forget(
    checksum_key: str,
    *,
    by: str | None = None,
    reason: str | None = None,
    cause: str = history.OPERATOR,
    session: Session | None = None,
) -> CommandResult:
    """Remove the achievement under ``checksum_key``: the next invocation runs."""

    def work(s: Session) -> CommandResult:
        removed = achievement.forget(s, checksum_key)
        result = CommandResult(removed, "forgotten" if removed else "not_found")
        audit.record(
            s,
            "forget",
            f"achievement:{checksum_key}",
            cause=cause,
            by=by,
            reason=reason,
            result=result.reason,
        )
        return result

    return run(session, work)
