"""Concluding a batch: the step bodies whose outcomes a group-commit batch records,
concluded together.

``conclude_all`` is the set-based form of ``conclusion.conclude_body`` for the bodies that a
worker hands to its process's next batch (those that wrote nothing: engine/step_body.py).
Most of them end their action the common way: the body succeeded asking for nothing more
(no children, waits, compensations or decision) and left its arguments as they were, in
the last step of a performing action that is its lane's current one, is not outbound, and
has no checksum, no compensations and no after-callbacks for success. On PostgreSQL those
take, whatever their number:

- one ``SELECT … FOR UPDATE`` of the batch's steps with their actions, in id order;
- one ``SELECT … FOR UPDATE`` of their lanes, in key order (a statement of its own, as
  engine/closing.py explains);
- one statement completing them: each action succeeded (if it is still performing), its
  step succeeded, and its lane removed when no other member is left;
- one statement concluding the invocations that waited on them and decrementing their
  steps (engine/concluding.py).

A step that waited on them and has nothing left to wait for completes as before, as does
a lane that has other members (its next one performs). Every other outcome (a failure, a
retry, children, a decision, a step that is not the last...) is concluded one step at a
time by ``conclude_body``, after those, in step id order, reading its rows afresh. SQLite
concludes every step one at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Table
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from . import broker, clock, concluding, history, lease, performance, recordset, status
from .action import Action
from .closing import ends_here
from .completion import complete_step, pass_on
from .conclusion import Outcome, conclude_body
from .errors import ActorNotFound, ArgumentError, UnknownAction
from .group_commit import Unit
from .performance import Performance
from .step import Step, mark_written


@dataclass
class _Ending:
    """A step body that ends its action the common way, with its unit in the batch."""

    unit: Unit[Any]
    step: Step
    action: Action
    outcome: Outcome
    lane: Performance | None = None


def conclude_all(session: Session, units: Sequence[Unit[Any]]) -> None:
    """Conclude the body each unit's ``item`` names, ``(step_id, outcome)``, as
    ``conclude_body`` would one by one in step id order. What a conclusion registers for
    after the commit (history aside) is its own unit's."""
    ordered = sorted(units, key=lambda unit: cast(int, unit.item[0]))
    endings: list[_Ending] = []
    if session.get_bind().dialect.name == "postgresql" and any(_may_end(unit.item[1]) for unit in units):
        endings = _lock_endings(session, ordered)
        _complete_all(session, endings)
    concluded = {id(ending.unit) for ending in endings}
    for unit in ordered:
        if id(unit) not in concluded:
            with unit.collecting(session):
                conclude_body(session, *unit.item)


def _may_end(outcome: Outcome) -> bool:
    """What the outcome alone tells: whether its step may end its action the common way."""
    return outcome.error is None and outcome.context.asked_nothing()


def _lock_endings(session: Session, ordered: list[Unit[Any]]) -> list[_Ending]:
    """Lock every step of the batch, then the lanes of those that end their actions the
    common way: those, each as its lane's current action."""
    rows = session.execute(lease.LOCK_ALL, {"ids": sorted({unit.item[0] for unit in ordered})}).all()
    found: dict[int, tuple[Step, Action]] = {step.id: (step, action) for step, action in rows}
    candidates: list[_Ending] = []
    taken: set[int] = set()  # one conclusion per action (a step delivered twice concludes once)
    for unit in ordered:
        step_id, outcome = unit.item
        row = found.get(step_id)
        if row is not None and row[1].id not in taken and _ends_commonly(session, *row, outcome):
            taken.add(row[1].id)
            candidates.append(_Ending(unit, *row, outcome))
    lanes = performance.lock_all(session, {ending.action.concurrency_key or "" for ending in candidates})
    endings: list[_Ending] = []
    for ending in candidates:
        ending.lane = lanes.get(ending.action.concurrency_key or "")
        if ending.lane is not None and ending.lane.action_id == ending.action.id:
            endings.append(ending)
    return endings


def _ends_commonly(session: Session, step: Step, action: Action, outcome: Outcome) -> bool:
    if (
        step.performed_at is not None
        or step.completed_at is not None
        or step.status != status.STEP_PERFORMING
        or step.attempt != outcome.attempt
        or step.pending_actions_count
        or step.unsuccessful_actions_count
        or not _may_end(outcome)
        or outcome.arguments_json != action.arguments_json
        or action.checksum is not None
        or not ends_here(session, action, step)
    ):
        return False
    try:
        return not action.definition.callbacks_for(status.SUCCEEDED)
    except (ActorNotFound, ArgumentError, UnknownAction):
        return False  # conclude_body fails it as changed by a deploy


def _complete_all(session: Session, endings: list[_Ending]) -> None:
    """Complete the actions of ``endings`` (their lanes locked), conclude what waited on
    them, and move on their lanes."""
    if not endings:
        return
    now = clock.now()
    rows = [
        {
            "action_id": ending.action.id,
            "step_id": ending.step.id,
            "lane_id": ending.lane.id if ending.lane is not None else None,
            "concurrency_key": ending.action.concurrency_key,
            "result": ending.outcome.result_json,
        }
        for ending in endings
    ]
    session.flush()  # what the statement may read is written first
    result = session.connection().exec_driver_sql(_COMPLETED_SQL, (recordset.dumps(rows), now))
    completed: dict[int, int | None] = dict(result.all())
    for ending in endings:
        with ending.unit.collecting(session):
            _record(session, ending, now, ending.action.id in completed)
    owners = {ending.action.id: ending.unit for ending in endings}
    waiting = concluding.conclude_waiters_of(session, sorted(completed), True, now) if completed else []
    for step, waited_for in waiting:
        if step.pending_actions_count == 0 and step.completed_at is None:
            with owners[waited_for].collecting(session):
                complete_step(session, step)
    for ending in endings:
        if ending.action.id not in completed or ending.lane is None:
            continue  # completed meanwhile: whoever did moved the lane on
        if completed[ending.action.id] is not None:
            session.expunge(ending.lane)  # removed: no other member was left
        else:
            with ending.unit.collecting(session):
                pass_on(session, ending.lane, ending.action)


def _record(session: Session, ending: _Ending, now: Any, completed: bool) -> None:
    """What the statement wrote, as the session holds it, and its history."""
    step, action, outcome = ending.step, ending.action, ending.outcome
    for callback in outcome.after_commit:
        broker.after_commit(session, callback)
    written = {"status": status.STEP_SUCCEEDED, "performed_at": now, "completed_at": now, "retry_at": None}
    mark_written(step, {**written, "result": outcome.result_json, "updated_at": now})
    history.record(session, action, "step_concluded", step_id=step.id, status=step.status)
    if not completed:
        return  # a timeout, a cancel or an outside completion came first
    values = {"status": status.SUCCEEDED, "completed_at": now, "updated_at": now}
    if outcome.result_json is not None:
        values["result"] = outcome.result_json
    for key, value in values.items():
        set_committed_value(action, key, value)
    history.record(session, action, "completed", status=status.SUCCEEDED)


_ACTIONS = cast(Table, Action.__table__).name
_STEPS = cast(Table, Step.__table__).name
_LANES = cast(Table, Performance.__table__).name
_INCOMPLETE = ", ".join(f"'{name}'" for name in sorted(status.INCOMPLETE))
#: The endings (JSON rows: the action, its step, its lane, its key and its result) and the
#: time: each action still performing succeeded with its step's result, each step written
#: as succeeded, and each lane whose completing action was its last incomplete member
#: removed. The lane's members are read as of the statement's start, when the action is
#: still performing: it is left out by its id (as in ``performance.closing``). Returns each
#: completed action's id and its lane's id if the lane was removed.
_COMPLETED_SQL = f"""
WITH ending AS (
  SELECT * FROM json_to_recordset(%s::json)
    AS ending(action_id bigint, step_id bigint, lane_id bigint, concurrency_key text, result json)
), now AS (
  SELECT %s::timestamp AS at
), completed AS (
  UPDATE {_ACTIONS} AS action
  SET status = '{status.SUCCEEDED}', completed_at = now.at, updated_at = now.at,
      result = COALESCE(ending.result, action.result)
  FROM ending, now
  WHERE action.id = ending.action_id AND action.status = '{status.PERFORMING}'
  RETURNING action.id, ending.lane_id, ending.concurrency_key
), stepped AS (
  UPDATE {_STEPS} AS step
  SET status = '{status.STEP_SUCCEEDED}', performed_at = now.at, completed_at = now.at,
      retry_at = NULL, result = ending.result, updated_at = now.at
  FROM ending, now
  WHERE step.id = ending.step_id
), closed AS (
  DELETE FROM {_LANES} AS lane USING completed
  WHERE lane.id = completed.lane_id AND NOT EXISTS (
    SELECT FROM {_ACTIONS} AS member
    WHERE member.concurrency_key = completed.concurrency_key
      AND member.status IN ({_INCOMPLETE}) AND member.id <> completed.id
  )
  RETURNING lane.id
)
SELECT completed.id, closed.id FROM completed LEFT JOIN closed ON closed.id = completed.lane_id"""
