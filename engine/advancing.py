"""Advancing an action to its next step: one guarded UPDATE that is also the fresh read of
its status under the lane's lock (it matches only a performing action) and returns how
often that step ran before (its highest visit), so that the next visit can be opened
without a statement of its own. Used by ``completion.accomplished``.
"""

from __future__ import annotations

from sqlalchemy import bindparam, func, select, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from . import clock, status
from .action import Action
from .step import Step

#: The action moves to its step ``index``, if it is still performing; it returns how
#: often that step ran so far (its highest visit, None when never).
_ADVANCE = (
    update(Action.__table__)  # type: ignore[arg-type]
    .where(Action.__table__.c.id == bindparam("action_id"), Action.__table__.c.status == status.PERFORMING)
    .values(current_step_index=bindparam("index"), updated_at=bindparam("now"))
    .returning(
        select(func.max(Step.visit))
        .where(Step.action_id == bindparam("action_id"), Step.definition_index == bindparam("index"))
        .scalar_subquery()
    )
)


def advance(session: Session, action: Action, index: int) -> int | None:
    """Move ``action`` to its step ``index``: how often that step ran before, or None when
    the action is no longer performing (then nothing changed)."""
    now = clock.now()
    parameters = {"action_id": action.id, "index": index, "now": now}
    row = session.connection().execute(_ADVANCE, parameters).first()
    if row is None:
        return None
    set_committed_value(action, "current_step_index", index)
    set_committed_value(action, "updated_at", now)
    return int(row[0] or 0)
