"""Advancing an action to its next step: one guarded UPDATE that is also the fresh read of
its status under the lane's lock (it matches only a performing action) and returns how
often that step ran before (its highest visit), so that the next visit can be opened
without a statement of its own. Used by ``completion.accomplished``.

``advance_all`` does the same for many actions at once (PostgreSQL, a group-commit batch:
engine/batch_conclusion.py), with their concluded steps written and their next steps
opened in the same statement.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, func, select, update
from sqlalchemy.orm import Session

from . import clock, recordset, rows, status
from .action import Action
from .step import Step, mark_written

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
    rows.set_committed(action, {"current_step_index": index, "updated_at": now})
    return int(row[0] or 0)


def advance_all(session: Session, moves: list[tuple[Action, Step]], now: Any) -> dict[int, tuple[int, int]]:
    """Each step of ``moves`` succeeded: write it, and move its action (if still performing)
    to its next step, opened as that step's next visit. By action id, the next step's id
    and visit, for the actions that moved."""
    moving = [
        {"action_id": action.id, "step_id": step.id, "next_index": action.current_step_index + 1}
        for action, step in moves
    ]
    session.flush()  # what the statement may read is written first
    result = session.connection().exec_driver_sql(_ADVANCE_ALL_SQL, (recordset.dumps(moving), now))
    opened = {action_id: (step_id, visit) for action_id, step_id, visit in result.all()}
    for action, step in moves:
        mark_written(step, {"status": status.STEP_SUCCEEDED, "completed_at": now, "updated_at": now})
        if action.id in opened:
            moved = {"current_step_index": action.current_step_index + 1, "updated_at": now}
            rows.set_committed(action, moved)
    return opened


_ACTIONS = Action.__tablename__
_STEPS = Step.__tablename__
#: The moves (JSON rows: the action, its concluded step, the index of its next step) and
#: the time: each step written as succeeded; each action still performing moved to its
#: next step, opened (as ``step.open_step`` opens one) as its next visit. Returns the
#: opened steps: their action, their id and their visit. The actions are reached by key,
#: whatever PostgreSQL believes of the live rows (engine/recordset.py).
_ADVANCE_ALL_SQL = f"""
WITH moving AS (
  SELECT * FROM json_to_recordset(%s::json) AS moving(action_id bigint, step_id bigint, next_index int)
), now AS MATERIALIZED (
  SELECT %s::timestamp AS at, '{status.PERFORMING}'::text AS performing
), concluded AS (
  UPDATE {_STEPS} AS step
  SET status = '{status.STEP_SUCCEEDED}', completed_at = now.at, updated_at = now.at
  FROM moving, now
  WHERE step.id = moving.step_id AND step.id = ANY(ARRAY(SELECT step_id FROM moving))
), moved AS (
  UPDATE {_ACTIONS} AS action
  SET current_step_index = moving.next_index, updated_at = now.at
  FROM moving, now
  WHERE action.id = moving.action_id AND action.id = ANY(ARRAY(SELECT action_id FROM moving))
    AND action.status IS NOT DISTINCT FROM now.performing
  RETURNING action.id, moving.next_index
), opened AS (
  INSERT INTO {_STEPS} (action_id, definition_index, status, pending_actions_count,
    unsuccessful_actions_count, attempt, started_at, created_at, updated_at, resend_count, visit)
  SELECT moved.id, moved.next_index, '{status.STEP_PERFORMING}', 0, 0, 1, now.at, now.at, now.at, 0,
    COALESCE((SELECT max(ran.visit) FROM {_STEPS} AS ran
              WHERE ran.action_id = moved.id AND ran.definition_index = moved.next_index), 0) + 1
  FROM moved, now
  ORDER BY moved.id
  RETURNING action_id, id, visit
)
SELECT action_id, id, visit FROM opened"""
