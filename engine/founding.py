"""Founding lanes: on PostgreSQL, invocations whose lanes do not exist become their lanes'
performing actions, with their first steps open and their invocations settled, in two
statements however many they are (``found_all``: the rows travel as JSON, as in
engine/recordset.py, so the text and its prepared plan are the same for one or many).

Admission found no lane for the candidate's key (``performance.lock`` read none), so the
candidate will perform at once. The general path writes that in five statements (the
action as pending, the lane, the action moved to performing with its key's achievement
erased, the step, the invocation settled and linked to its parent step). Here the lane's
INSERT comes first, taking the action's id from its sequence; then one chain of
data-modifying CTEs writes the action row once, already performing, instead of inserted
and then updated (an UPDATE of a status is never HOT: it writes every index of the table
again), erases the achievement, opens the step and settles the invocation.

The lane's INSERT is a statement of its own because it may wait: for another admission
founding the same lane (``ON CONFLICT DO NOTHING`` then inserts nothing, ``found``
returns False and admission locks that lane as usual), or for a transaction removing the
lane as its last action completes. The action's start is taken after that wait, so it
never precedes that completion (the chaos test caught a start taken before it, when both
were one statement). SQLite (no DML in a CTE) keeps the general path.

The lanes' INSERT takes its keys in order, the order in which every statement locks
lanes, so that two batches founding overlapping lanes wait for each other instead of
deadlocking.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any, cast

from sqlalchemy import Table
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.orm import Session

from . import broker, clock, history, recordset, rows, status
from .achievement import Achievement
from .action import Action
from .invocation import Invocation
from .performance import Performance
from .step import Step, step_actions

_ACTIONS = cast(Table, Action.__table__)
_STEPS = cast(Table, Step.__table__)
_ACHIEVEMENTS = cast(Table, Achievement.__table__)
_INVOCATIONS = cast(Table, Invocation.__table__)
#: The identity key of the action whose id is given.
_IDENTITY = sa_inspect(Action).identity_key_from_primary_key
#: (column, attribute) of every column the action's INSERT writes but its id.
_COLUMNS = [
    (column, prop.key)
    for prop in Action.__mapper__.column_attrs
    for column in prop.columns
    if column.table is _ACTIONS and column.name != "id"
]


def found(session: Session, candidate: Action, invocation: Invocation) -> bool:
    """Write ``candidate`` (pending, not yet in the session) as the performing action of a
    new lane, open its first step and settle ``invocation`` as admitted: True when done
    (``candidate`` is then persistent in ``session``), False when the lane exists after
    all (nothing was written)."""
    (step_id,) = found_all(session, [(candidate, invocation)])
    if step_id is None:
        return False
    record(session, candidate, invocation, step_id)
    return True


def found_all(session: Session, admissions: Sequence[tuple[Action, Invocation]]) -> list[int | None]:
    """``found`` for many candidates at once, each of a distinct key whose lane admission
    found none: two statements whatever their number. Returns each one's first step id,
    or None where its lane exists after all (nothing was written for it). The caller
    ``record``s each founded one, in its own transition's share of the session."""
    if not admissions:
        return []
    session.flush()  # what the statements may read is written first
    lanes = [
        {
            "concurrency_key": candidate.concurrency_key,
            "outbound_complete_key": candidate.tenancy_key if candidate.outbound else None,
        }
        for candidate, _ in admissions
    ]
    connection = session.connection()
    lanes_inserted = connection.exec_driver_sql(_LANES_SQL, (recordset.dumps(lanes), clock.now()))
    ids: dict[str, int] = dict(lanes_inserted.all())
    if not ids:
        return [None] * len(admissions)
    now = clock.now()  # after any wait for the lanes' INSERT (module docstring)
    founded: list[tuple[Action, Invocation, dict[str, Any]]] = []
    for candidate, invocation in admissions:
        action_id = ids.get(candidate.concurrency_key)
        if action_id is not None:
            founded.append((candidate, invocation, {"id": action_id, **_values(candidate, now)}))
    actions = [{column.name: values[name] for column, name in _COLUMNS_AND_ID} for _, _, values in founded]
    links = [
        {
            "action_id": values["id"],
            "invocation_id": invocation.id,
            "parent_step_id": invocation.parent_step_id,
            "definition_index": candidate.current_step_index,
        }
        for candidate, invocation, values in founded
    ]
    parameters = (recordset.dumps(actions), recordset.dumps(links), now)
    opened: dict[int, int] = dict(connection.exec_driver_sql(_FOUNDED_SQL, parameters).all())
    for candidate, invocation, values in founded:
        # Set as loaded, not through the attributes' events: they are committed as loaded
        # values (nothing on Action listens to "set").
        candidate.__dict__.update(values)
        rows.persist(session, candidate, _IDENTITY((values["id"],)))
        rows.set_committed(invocation, {"settled_at": now, "outcome": "admitted", "action_id": candidate.id})
    action_ids = [ids.get(candidate.concurrency_key) for candidate, _ in admissions]
    return [None if action_id is None else opened[action_id] for action_id in action_ids]


def record(session: Session, candidate: Action, invocation: Invocation, step_id: int) -> None:
    """What follows a founded action's commit: its history, its first step's body, its
    timeout."""
    at, key = candidate.started_at, candidate.concurrency_key  # the founding's time
    history.record(session, candidate, "admitted", lane=key, invocation_id=invocation.id, at=at)
    history.record(session, candidate, "started", at=at)
    index = candidate.current_step_index
    history.record(session, candidate, "step_started", step_id=step_id, index=index, at=at)
    broker.ready_after_commit(session, step_id)
    if candidate.timeout_seconds:
        delay = timedelta(seconds=candidate.timeout_seconds)
        broker.enqueue(session, broker.TIMEOUT, candidate.id, delay=delay)


def _values(candidate: Action, now: Any) -> dict[str, Any]:
    """Every column's value for the action's row: as set on the candidate, else the
    column's default; performing from ``now``."""
    state = candidate.__dict__
    values: dict[str, Any] = {}
    for column, name in _COLUMNS:
        if name in state:
            values[name] = state[name]
        elif column.default is not None and column.default.is_scalar:
            values[name] = column.default.arg
        elif column.default is not None:  # created_at, updated_at: clock.now
            values[name] = now
        else:
            values[name] = None
    timeout = values["timeout_seconds"]
    values.update(
        status=status.PERFORMING,
        started_at=now,
        deadline_at=now + timedelta(seconds=timeout) if timeout else None,
        created_at=now,
        updated_at=now,
    )
    return values


_LANES = cast(Table, Performance.__table__)
#: The lanes (key and outbound key, as JSON rows; then the time), each with the id its
#: action will have: a row for each lane inserted, none where the lane exists. Keys in
#: order: the lock order of every lane statement.
_LANES_SQL = f"""
INSERT INTO {_LANES.name} (concurrency_key, action_id, outbound_complete_key, created_at, updated_at)
SELECT lane.concurrency_key, nextval(pg_get_serial_sequence('{_ACTIONS.name}', 'id')),
       lane.outbound_complete_key, now.at, now.at
FROM json_populate_recordset(NULL::{_LANES.name}, %s::json) AS lane, (SELECT %s::timestamp AS at) AS now
ORDER BY lane.concurrency_key
ON CONFLICT (concurrency_key) DO NOTHING
RETURNING concurrency_key, action_id"""

_COLUMNS_AND_ID = [(_ACTIONS.c.id, "id"), *_COLUMNS]
_NAMES = ", ".join(column.name for column, _ in _COLUMNS_AND_ID)
#: The actions (JSON rows of every column, already performing), what links each to its
#: invocation and its parent step (JSON rows), and the time: the actions, their keys'
#: achievements erased, their first steps opened, their invocations settled and linked to
#: their parent steps. Returns each action's id and its first step's.
_FOUNDED_SQL = f"""
WITH founded AS (
  INSERT INTO {_ACTIONS.name} ({_NAMES})
  SELECT {_NAMES} FROM json_populate_recordset(NULL::{_ACTIONS.name}, %s::json)
  RETURNING id, checksum_key
), link AS (
  SELECT * FROM json_to_recordset(%s::json)
    AS link(action_id bigint, invocation_id bigint, parent_step_id bigint, definition_index integer)
), now AS (
  SELECT %s::timestamp AS at
), erased AS (
  DELETE FROM {_ACHIEVEMENTS.name} WHERE checksum_key = ANY(ARRAY(SELECT checksum_key FROM founded))
), opened AS (
  INSERT INTO {_STEPS.name} (action_id, definition_index, visit, attempt, status, pending_actions_count,
                             unsuccessful_actions_count, started_at, created_at, updated_at)
  SELECT founded.id, link.definition_index, 1, 1, '{status.STEP_PERFORMING}', 0, 0, now.at, now.at, now.at
  FROM founded JOIN link ON link.action_id = founded.id, now
  ORDER BY founded.id
  RETURNING action_id, id
), settled AS (
  UPDATE {_INVOCATIONS.name} AS invocation
  SET settled_at = now.at, outcome = 'admitted', action_id = founded.id
  FROM founded JOIN link ON link.action_id = founded.id, now
  WHERE invocation.id = link.invocation_id AND invocation.id = ANY(ARRAY(SELECT invocation_id FROM link))
), linked AS (
  INSERT INTO {step_actions.name} (parent_step_id, child_action_id)
  SELECT link.parent_step_id, founded.id FROM founded JOIN link ON link.action_id = founded.id
  WHERE link.parent_step_id IS NOT NULL
  ON CONFLICT (parent_step_id, child_action_id) DO NOTHING
)
SELECT action_id, id FROM opened"""
