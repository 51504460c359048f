"""Completing an action from outside its own steps (an operator's cancel or skip, a
timeout, an outbound completion, a stalled action given up): under its lane's lock, with
its status read afresh, then moved on as ``completion.forward`` moves any completion.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from . import history, performance, status
from .action import Action
from .completion import forward


@dataclass
class Completion:
    """The result of completing an action from outside. Falsy when nothing was completed:
    ``reason`` is then ``"already_completed"`` or ``"not_found"``."""

    completed: bool
    reason: str
    action: Action | None = None

    def __bool__(self) -> bool:
        return self.completed


def complete_action(
    session: Session,
    action: Action,
    to: str,
    *,
    cause: str = history.WORKER,
    by: str | None = None,
    note: str | None = None,
    error: BaseException | None = None,
) -> Completion:
    """Complete ``action`` (pending or performing) under its lane's lock and advance the lane."""
    session.flush()
    lane = performance.lock(session, action.concurrency_key)
    fresh = session.get(Action, action.id, populate_existing=True)
    assert fresh is not None
    if fresh.status not in status.INCOMPLETE:
        return Completion(False, "already_completed", fresh)
    forward(session, lane, fresh, to, cause=cause, by=by, note=note, error=error)
    return Completion(True, "completed", fresh)
