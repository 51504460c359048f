"""Sending a signal by hand (the studio's form, ``stepwise signal``), audited like every
command: the engine's ``inbox.send`` in one transaction, refused with a reason when the
action is unknown or finished."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from .. import audit, history, inbox
from ..errors import SignalRefused
from .result import CommandResult, run


def signal(
    action_id: int,
    name: str,
    payload: Any = None,
    *,
    by: str | None = None,
    note: str | None = None,
    cause: str = history.OPERATOR,
    command: str = "signal",
    session: Session | None = None,
) -> CommandResult:
    """Send signal ``name`` with ``payload`` to action ``action_id``. Falsy, with reason
    ``not_found`` or ``finished``, when it was refused (nothing recorded but the audit);
    else the reason says whether a waiting step ``consumed`` it or it was ``kept`` in the
    inbox."""

    def work(s: Session) -> CommandResult:
        try:
            sent = inbox.send(s, action_id, name, payload, by=by, note=note)
        except SignalRefused as refused:
            result = CommandResult(False, refused.reason, action_id)
        else:
            result = CommandResult(True, "consumed" if sent.consumed_at is not None else "kept", action_id)
        data: dict[str, Any] = {"signal": name}
        if payload is not None:
            data["payload"] = payload
        audit.record(
            s, command, f"action:{action_id}", cause=cause, by=by, reason=note, result=result.reason, **data
        )
        return result

    return run(session, work)
