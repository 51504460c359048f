"""Why an operator's command changed nothing: the action page's sentence for each reason
the engine's commands give."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from engine.commands import CommandResult
from engine.models import Action


def refusal(session: Session, action_id: int, result: CommandResult) -> str:
    """Why an operator's command on the action page changed nothing, in a sentence."""
    state = session.scalar(select(Action.status).where(Action.id == action_id)) or "gone"
    shown = state.replace("_", " ")
    if result.reason == "already_completed":
        return f"Action {action_id} is already completed ({shown}): nothing was changed."
    if result.reason == "not_retryable":
        return (
            f"Action {action_id} is {shown}: only a failed, timed-out or cancelled action can be "
            "retried. Nothing was changed."
        )
    if result.reason == "compensating":
        return (
            f"Action {action_id} is compensating: it undoes its completed steps before it ends. "
            "If a compensation failed, retry or skip that compensation. Nothing was changed."
        )
    if result.reason == "compensated" and result.action_id not in (None, action_id):
        return (
            f"Action {action_id} failed because action {result.action_id} below it failed and was "
            "compensated: its completed steps were undone, so it cannot carry on where it stopped. "
            "Start it again instead. Nothing was changed."
        )
    if result.reason == "compensated":
        return (
            f"Action {action_id} was compensated: its completed steps were undone, so it cannot "
            "carry on where it stopped. Start it again instead. Nothing was changed."
        )
    if result.reason == "not_failed":
        return (
            f"Action {action_id} is {shown}: only a failed or timed-out action can be skipped. "
            "Nothing was changed."
        )
    if result.reason == "not_a_leaf":
        return (
            f"Action {action_id} failed because action {result.action_id} below it failed: skip "
            f"that one (or retry this one). Nothing was changed."
        )
    if result.reason == "not_outbound":
        return (
            f"Action {action_id} is not outbound: only an outbound action is completed from "
            "outside. Nothing was changed."
        )
    if result.reason == "finished":
        return f"Action {action_id} is {shown}: a finished action takes no signals. Nothing was sent."
    return f"Action {action_id}: {result.reason.replace('_', ' ')}. Nothing was changed."
