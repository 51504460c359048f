"""After-callbacks: the user's hooks that run once an action completes (``after`` in the
definition), each counted on the action and its failure stored on it (invariant 8).
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from . import db, history
from .action import Action, error_data
from .config import run_user_code
from .errors import ActorNotFound, UnknownAction


def run_callbacks(session: Session, action: Action, completed_status: str) -> None:
    """Run the after-callbacks registered for ``completed_status``, each once, counting
    those that succeeded and failed on the action."""
    try:
        callbacks = action.definition.callbacks_for(completed_status)
        actor = action.actor if callbacks else None
    except (ActorNotFound, UnknownAction) as gone:
        # Removed by a deploy (or its actor deleted): what is gone cannot be called back.
        history.record(session, action, "callbacks_skipped", status=completed_status, **error_data(gone))
        return
    if not callbacks:
        return
    with db.planned_as_usual(session):  # the user's queries may need to read a table whole
        for callback in callbacks:
            error = run_user_code(callback, actor, action, *action.arguments)
            if error is None:
                action.after_callbacks_succeeded_count = (action.after_callbacks_succeeded_count or 0) + 1
            else:
                action.after_callbacks_failed_count = (action.after_callbacks_failed_count or 0) + 1
                action.record_error(error)
                failure = error_data(error)
                history.record(session, action, "callback_failed", status=completed_status, **failure)
