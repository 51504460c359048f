"""Concluding a batch: the step bodies whose outcomes a group-commit batch records,
concluded together.

``conclude_all`` is the set-based form of ``conclusion.conclude_body`` for the bodies that a
worker hands to its process's next batch (those that wrote nothing: engine/running.py).
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

A step that waited on them and has nothing left to wait for, its children all succeeded,
moves its action on in set statements too (``_parents_moving_on``): it ends its action the
same way, in the same statements, when it is that action's last step (a tree's root
completing with its last leaves), and otherwise its action moves to its next step, all
such in one statement (``advancing.advance_all``). Any other such step completes as before
(``complete_step``), and a lane that has other members moves on to its next one. Every
other body's outcome (a failure, a retry, children, a decision, a step that is not the
last...) is concluded one step at a time by ``conclude_body``, after those, in step id
order, reading its rows afresh. SQLite concludes every step one at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from sqlalchemy import Table
from sqlalchemy.orm import Session

from . import advancing as advancing_
from . import batch_spawning, broker, clock, concluding, history, lease, performance, recordset, rows, status
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
    """A step that ends its action the common way, with its unit in the batch: a body that
    ran, or a step whose children all succeeded. ``result`` is the step's, stored form."""

    unit: Unit[Any]
    step: Step
    action: Action
    result: Any
    after_commit: list[Any] = field(default_factory=list)
    lane: Performance | None = None


def conclude_all(session: Session, units: Sequence[Unit[Any]]) -> None:
    """Conclude the body each unit's ``item`` names, ``(step_id, outcome)``, as
    ``conclude_body`` would one by one in step id order. What a conclusion registers for
    after the commit (history aside) is its own unit's."""
    ordered = sorted(units, key=lambda unit: cast(int, unit.item[0]))
    concluded: set[int] = set()
    if session.get_bind().dialect.name == "postgresql" and any(_in_sets(unit.item[1]) for unit in units):
        locked = _lock_all(session, ordered)
        # Children are recorded first: no ending below reads or writes their steps' rows.
        concluded = batch_spawning.spawn_all(session, ordered, locked)
        endings = _endings(session, ordered, locked)
        _complete_all(session, endings)
        concluded |= {id(ending.unit) for ending in endings}
    for unit in ordered:
        if id(unit) not in concluded:
            with unit.collecting(session):
                conclude_body(session, *unit.item)


def _may_end(outcome: Outcome) -> bool:
    """What the outcome alone tells: whether its step may end its action the common way."""
    return outcome.error is None and outcome.context.asked_nothing()


def _in_sets(outcome: Outcome) -> bool:
    """Whether the outcome may be concluded by set statements (see the module's doc)."""
    return _may_end(outcome) or batch_spawning.spawns_only(outcome)


def _lock_all(session: Session, ordered: list[Unit[Any]]) -> dict[int, tuple[Step, Action]]:
    """Every step of the batch, with its action, locked in id order and read afresh."""
    found = lease.lock_all(session, sorted({unit.item[0] for unit in ordered}))
    return {step.id: (step, action) for step, action in found}


def _endings(
    session: Session, ordered: list[Unit[Any]], found: dict[int, tuple[Step, Action]]
) -> list[_Ending]:
    """The lanes of the steps that end their actions the common way locked: those, each as
    its lane's current action."""
    candidates: list[_Ending] = []
    taken: set[int] = set()  # one conclusion per action (a step delivered twice concludes once)
    for unit in ordered:
        step_id, outcome = unit.item
        row = found.get(step_id)
        if row is not None and row[1].id not in taken and _ends_commonly(session, *row, outcome):
            taken.add(row[1].id)
            candidates.append(_Ending(unit, *row, outcome.result_json, outcome.after_commit))
    return _in_their_lanes(session, candidates)


def _in_their_lanes(session: Session, candidates: list[_Ending]) -> list[_Ending]:
    """Lock the lanes of ``candidates`` in key order: those whose action is its lane's
    current one."""
    lanes = performance.lock_all(session, {ending.action.concurrency_key or "" for ending in candidates})
    endings: list[_Ending] = []
    for ending in candidates:
        ending.lane = lanes.get(ending.action.concurrency_key or "")
        if ending.lane is not None and ending.lane.action_id == ending.action.id:
            endings.append(ending)
    return endings


def _ends_commonly(session: Session, step: Step, action: Action, outcome: Outcome) -> bool:
    return (
        step.performed_at is None
        and step.completed_at is None
        and step.attempt == outcome.attempt
        and not step.pending_actions_count
        and _may_end(outcome)
        and outcome.arguments_json == action.arguments_json
        and _step_ends_commonly(session, step, action)
    )


def _step_ends_commonly(session: Session, step: Step, action: Action) -> bool:
    """Whether the step, succeeded, ends its action the common way: see the module's doc."""
    if (
        step.status != status.STEP_PERFORMING
        or step.unsuccessful_actions_count
        or action.checksum is not None
        or not ends_here(session, action, step)
    ):
        return False
    try:
        return not action.definition.callbacks_for(status.SUCCEEDED)
    except (ActorNotFound, ArgumentError, UnknownAction):
        return False  # conclude_body (or complete_step) fails it as changed by a deploy


def _parents_moving_on(
    session: Session, at_zero: list[tuple[Step, Unit[Any]]]
) -> tuple[list[_Ending], list[_Ending]]:
    """Of the steps whose children have all concluded, each with the unit that concluded
    its last child: those that end their actions the common way, and those whose actions
    simply move on to their next step (their actions read in one statement, the lanes of
    both locked in one more)."""
    ids = sorted({step.action_id for step, _ in at_zero})
    if not ids:
        return [], []
    actions = {action.id: action for action in rows.by_ids(session, Action, ids, refresh=True)}
    ending: list[_Ending] = []
    advancing: list[_Ending] = []
    for step, unit in at_zero:
        action = actions.get(step.action_id)
        if action is not None and _step_ends_commonly(session, step, action):
            ending.append(_Ending(unit, step, action, step.result))
        elif action is not None and _step_advances_commonly(step, action):
            advancing.append(_Ending(unit, step, action, step.result))
    kept = {id(parent) for parent in _in_their_lanes(session, [*ending, *advancing])}
    return [p for p in ending if id(p) in kept], [p for p in advancing if id(p) in kept]


def _step_advances_commonly(step: Step, action: Action) -> bool:
    """Whether the step, succeeded, moves its performing action on to its next step, as
    ``completion.accomplished`` would with nothing else to do (no failure, decision or
    compensation)."""
    if (
        step.status != status.STEP_PERFORMING
        or step.unsuccessful_actions_count
        or step.decision
        or action.status != status.PERFORMING
        or action.compensations_count
    ):
        return False
    try:
        return len(action.definition.all_steps()) > action.current_step_index + 1
    except (ActorNotFound, ArgumentError, UnknownAction):
        return False  # complete_step fails it as changed by a deploy


def _advance_all(session: Session, advancing: list[_Ending], now: Any) -> None:
    """Conclude the steps of ``advancing`` and open their actions' next steps, together;
    each one's history and ready step are its unit's."""
    if not advancing:
        return
    opened = advancing_.advance_all(session, [(parent.action, parent.step) for parent in advancing], now)
    for parent in advancing:
        step, action = parent.step, parent.action
        with parent.unit.collecting(session):
            history.record(session, action, "step_concluded", step_id=step.id, status=step.status, at=now)
            if action.id not in opened:
                session.refresh(action, ["status"])  # completed meanwhile: it stays so
                continue
            step_id, visit = opened[action.id]
            data: dict[str, Any] = {"visit": visit} if visit > 1 else {}
            index = action.current_step_index
            history.record(session, action, "step_started", step_id=step_id, index=index, at=now, **data)
            broker.ready_after_commit(session, step_id)


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
            "result": ending.result,
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
    at_zero = [
        (step, owners[waited_for])
        for step, waited_for in waiting
        if step.pending_actions_count == 0 and step.completed_at is None
    ]
    parents, advancing = _parents_moving_on(session, at_zero)
    moving_on = {id(parent.step) for parent in (*parents, *advancing)}
    for step, unit in at_zero:
        if id(step) not in moving_on:
            with unit.collecting(session):
                complete_step(session, step)
    _advance_all(session, advancing, now)
    _complete_all(session, parents)
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
    step, action = ending.step, ending.action
    for callback in ending.after_commit:
        broker.after_commit(session, callback)
    written = {"status": status.STEP_SUCCEEDED, "completed_at": now, "retry_at": None, "updated_at": now}
    written["leased_until"] = None
    mark_written(step, {**written, "performed_at": step.performed_at or now, "result": ending.result})
    history.record(session, action, "step_concluded", step_id=step.id, status=step.status, at=now)
    if not completed:
        return  # a timeout, a cancel or an outside completion came first
    values = {"status": status.SUCCEEDED, "completed_at": now, "updated_at": now}
    if ending.result is not None:
        values["result"] = ending.result
    rows.set_committed(action, values)
    history.record(session, action, "completed", status=status.SUCCEEDED, at=now)


_ACTIONS = cast(Table, Action.__table__).name
_STEPS = cast(Table, Step.__table__).name
_LANES = cast(Table, Performance.__table__).name
_INCOMPLETE = ", ".join(f"'{name}'" for name in sorted(status.INCOMPLETE))
#: The endings (JSON rows: the action, its step, its lane, its key and its result) and the
#: time: each action still performing succeeded with its step's result, each step written
#: as succeeded (and performed now, unless its body's run was recorded before), and each
#: lane whose completing action was its last incomplete member removed. The lane's members
#: are read as of the statement's start, when the action is still performing: it is left
#: out by its id (as in ``performance.closing``). Returns each completed action's id and
#: its lane's id if the lane was removed. Written so that each index it reads is probed by
#: key, whatever PostgreSQL believes of the live rows (engine/recordset.py).
_COMPLETED_SQL = f"""
WITH ending AS (
  SELECT * FROM json_to_recordset(%s::json)
    AS ending(action_id bigint, step_id bigint, lane_id bigint, concurrency_key text, result json)
), now AS MATERIALIZED (
  SELECT %s::timestamp AS at, '{status.PERFORMING}'::text AS performing
), completed AS (
  UPDATE {_ACTIONS} AS action
  SET status = '{status.SUCCEEDED}', completed_at = now.at, updated_at = now.at,
      result = COALESCE(ending.result, action.result)
  FROM ending, now
  WHERE action.id = ending.action_id AND action.id = ANY(ARRAY(SELECT action_id FROM ending))
    AND action.status IS NOT DISTINCT FROM now.performing
  RETURNING action.id, ending.lane_id, ending.concurrency_key
), stepped AS (
  UPDATE {_STEPS} AS step
  SET status = '{status.STEP_SUCCEEDED}', performed_at = COALESCE(step.performed_at, now.at),
      completed_at = now.at, retry_at = NULL, leased_until = NULL, result = ending.result, updated_at = now.at
  FROM ending, now
  WHERE step.id = ending.step_id AND step.id = ANY(ARRAY(SELECT step_id FROM ending))
), closed AS (
  DELETE FROM {_LANES} AS lane
  USING completed LEFT JOIN LATERAL (
    SELECT member.id FROM {_ACTIONS} AS member
    WHERE member.concurrency_key = completed.concurrency_key
      AND member.status IN ({_INCOMPLETE}) AND member.id <> completed.id
    ORDER BY member.id LIMIT 1
  ) AS other ON true
  WHERE lane.id = completed.lane_id AND other.id IS NULL
  RETURNING lane.id
)
SELECT completed.id, closed.id FROM completed LEFT JOIN closed ON closed.id = completed.lane_id"""
