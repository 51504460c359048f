"""Spawning as a set: the step bodies of a group-commit batch that started children and
asked for nothing else, recorded together (PostgreSQL: engine/batch_conclusion.py).

A body that succeeded, asked only for children (no waits, signal waits, compensations,
failure or decision) and left its arguments as they were, in a performing step of a
performing action, concludes as ``conclusion.conclude_body`` would conclude it: its
children's invocations inserted and due for admission, its history, and its step
performed and waiting on them. Here the invocations of all such bodies in the batch are
inserted, and their steps written, in one statement (``_SPAWNED_SQL``: the rows travel as
JSON, engine/recordset.py), with the step rows the batch has locked already
(``lease.LOCK_ALL``): no statement of their own per body, and no unit-of-work flush (an
ORM flush of the children cost 9% of the workers' Python time in ``bench/throughput.py``,
py-spy ``--gil``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from sqlalchemy import Table
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.orm import Session

from . import broker, clock, recordset, status
from .action import Action
from .conclusion import Outcome
from .group_commit import Unit
from .invocation import Invocation
from .step import Step, mark_written


def spawns_only(outcome: Outcome) -> bool:
    """What the outcome alone tells: whether the body asked for children and nothing else."""
    return outcome.error is None and outcome.context.asked_only_children()


def spawn_all(
    session: Session, ordered: Sequence[Unit[Any]], locked: dict[int, tuple[Step, Action]]
) -> set[int]:
    """Record the bodies of ``ordered`` (units whose item is ``(step_id, outcome)``, in step
    id order) that only started children, their steps ``locked`` in this transaction: the
    ``id()`` of the units concluded. A body delivered twice is recorded once."""
    spawning: list[tuple[Unit[Any], Step, Action, Outcome]] = []
    taken: set[int] = set()
    for unit in ordered:
        step_id, outcome = unit.item
        row = locked.get(step_id)
        if row is not None and step_id not in taken and _spawns_here(*row, outcome):
            taken.add(step_id)
            spawning.append((unit, *row, outcome))
    if not spawning:
        return set()
    requested: list[list[Invocation]] = []
    for _, step, action, outcome in spawning:
        outcome.context.rebind(session, step, action)
        requested.append(outcome.context._requests())
    now = clock.now()
    _insert(session, spawning, requested, now)
    for (unit, step, _, outcome), invocations in zip(spawning, requested, strict=True):
        with unit.collecting(session):
            for callback in outcome.after_commit:
                broker.after_commit(session, callback)
            outcome.context._recorded(invocations)
            # The statement wrote these already: the session holds them as stored.
            written = {"result": outcome.result_json, "decision": None, "retry_at": None}
            written["leased_until"] = None
            counted = {"pending_actions_count": step.pending_actions_count}
            mark_written(step, {**written, **counted, "performed_at": now, "updated_at": now})
    return {id(unit) for unit, *_ in spawning}


def _spawns_here(step: Step, action: Action, outcome: Outcome) -> bool:
    return (
        spawns_only(outcome)
        and step.performed_at is None
        and step.attempt == outcome.attempt
        and step.status == status.STEP_PERFORMING
        and action.status == status.PERFORMING
        and outcome.arguments_json == action.arguments_json
    )


def _insert(
    session: Session,
    spawning: list[tuple[Unit[Any], Step, Action, Outcome]],
    requested: list[list[Invocation]],
    now: Any,
) -> None:
    """Insert the invocations ``requested`` and write their steps, in one statement; each
    invocation gets its id (they are not added to the session: only their ids are read)."""
    invocations = [invocation for each in requested for invocation in each]
    rows = [{name: getattr(invocation, key) for name, key in _COLUMNS} for invocation in invocations]
    steps = [
        {"id": step.id, "result": outcome.result_json, "children": len(each)}
        for (_, step, _, outcome), each in zip(spawning, requested, strict=True)
    ]
    session.flush()  # what the statement may read is written first
    parameters = (recordset.dumps(rows), recordset.dumps(steps), now)
    ids: dict[int, int] = dict(session.connection().exec_driver_sql(_SPAWNED_SQL, parameters).all())
    for position, invocation in enumerate(invocations, 1):
        invocation.id = ids[position]


_INVOCATIONS = cast(Table, Invocation.__table__)
#: The columns an invocation's request sets (``invocation.request``; a wait's ``due_at``), by
#: column name and attribute key.
_REQUESTED = (
    "kind",
    "actor_type",
    "actor_id",
    "name",
    "arguments_json",
    "parent_step_id",
    "created_at",
    "due_at",
)
_COLUMNS = [(column.name, key) for key, column in sa_inspect(Invocation).columns.items() if key in _REQUESTED]
_NAMES = ", ".join(name for name, _ in _COLUMNS)
_ROW = ", ".join(f"request.{name}" for name, _ in _COLUMNS)
#: The invocations (JSON rows), the steps (JSON rows: the step, its body's stored result and
#: how many children it started) and the time: the invocations inserted, their ids taken
#: from their sequence in the order given (a step's children are read back in id order:
#: the order they were requested in), and each step performed now, waiting on its
#: children. Returns each invocation's position in the rows given (from 1) and its id.
_SPAWNED_SQL = f"""
WITH requested AS (
  SELECT nextval(pg_get_serial_sequence('{_INVOCATIONS.name}', 'id')) AS id,
         request.ordinality AS position, {_ROW}
  FROM json_populate_recordset(NULL::{_INVOCATIONS.name}, %s::json) WITH ORDINALITY AS request
  ORDER BY request.ordinality
), spawned AS (
  INSERT INTO {_INVOCATIONS.name} (id, {_NAMES}) SELECT id, {_NAMES} FROM requested
), body AS (
  SELECT * FROM json_to_recordset(%s::json) AS body(id bigint, result json, children integer)
), performed AS (
  UPDATE {Step.__tablename__} AS step
  SET result = body.result, decision = NULL, performed_at = now.at, retry_at = NULL, leased_until = NULL,
      pending_actions_count = step.pending_actions_count + body.children, updated_at = now.at
  FROM body, (SELECT %s::timestamp AS at) AS now
  WHERE step.id = body.id AND step.id = ANY(ARRAY(SELECT id FROM body))
)
SELECT position, id FROM requested"""
