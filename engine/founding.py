"""Founding a lane: on PostgreSQL, an invocation whose lane does not exist becomes the
lane's performing action, with its first step open and its invocation settled, in two
statements.

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
"""

from __future__ import annotations

import functools
from datetime import timedelta
from typing import Any, cast

from sqlalchemy import (
    BigInteger,
    Executable,
    Table,
    bindparam,
    delete,
    exists,
    func,
    insert,
    literal_column,
    select,
    true,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import Session, make_transient_to_detached
from sqlalchemy.orm.attributes import set_committed_value

from . import broker, clock, history, status
from .achievement import Achievement
from .action import Action
from .invocation import Invocation
from .performance import Performance
from .step import Step, step_actions

_ACTIONS = cast(Table, Action.__table__)
_STEPS = cast(Table, Step.__table__)
#: (column, attribute) of every column the action's INSERT writes but its id.
_COLUMNS = [
    (column, prop.key)
    for prop in Action.__mapper__.column_attrs
    for column in prop.columns
    if column.table is _ACTIONS and column.name != "id"
]


def found(session: Session, candidate: Action, invocation: Invocation) -> bool:
    """Write ``candidate`` (pending, not yet in the session) as the performing action of a
    new lane, open its first step and settle ``invocation`` as admitted, in one statement:
    True when done (``candidate`` is then persistent in ``session``), False when the lane
    exists after all (nothing was written)."""
    session.flush()  # what the statements may read is written first
    lane = {"f_key": candidate.concurrency_key, "f_now": clock.now()}
    lane["f_outbound_key"] = candidate.tenancy_key if candidate.outbound else None
    founded = session.connection().execute(_LANE, lane).first()
    if founded is None:
        return False
    now = clock.now()  # after any wait for the lane's INSERT (module docstring)
    values = _values(candidate, now)
    parameters: dict[str, Any] = {f"a_{name}": value for name, value in values.items()}
    # (No parameter is named after a column: Core would add it to an INSERT's or UPDATE's
    # columns.)
    parameters.update(
        f_action_id=founded[0],
        f_erase_key=candidate.checksum_key,
        f_index=candidate.current_step_index,
        f_invocation_id=invocation.id,
        f_now=now,
    )
    linked = invocation.parent_step_id is not None
    if linked:
        parameters["f_parent_step_id"] = invocation.parent_step_id
    action_id, step_id = session.connection().execute(_statement(linked), parameters).one()
    for name, value in values.items():
        setattr(candidate, name, value)
    candidate.id = action_id
    make_transient_to_detached(candidate)
    session.add(candidate)
    for name, value in (("settled_at", now), ("outcome", "admitted"), ("action_id", action_id)):
        set_committed_value(invocation, name, value)
    history.record(
        session, candidate, "admitted", lane=candidate.concurrency_key, invocation_id=invocation.id
    )
    history.record(session, candidate, "started")
    history.record(session, candidate, "step_started", step_id=step_id, index=candidate.current_step_index)
    broker.ready_after_commit(session, step_id)
    if candidate.timeout_seconds:
        delay = timedelta(seconds=candidate.timeout_seconds)
        broker.enqueue(session, broker.TIMEOUT, action_id, delay=delay)
    return True


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
#: The lane, with the id its action will have: that id, or no row when the lane exists.
_LANE = (
    pg_insert(_LANES)
    .values(
        concurrency_key=bindparam("f_key"),
        action_id=func.nextval(literal_column(f"pg_get_serial_sequence('{_ACTIONS.name}', 'id')")),
        outbound_complete_key=bindparam("f_outbound_key"),
        created_at=bindparam("f_now"),
        updated_at=bindparam("f_now"),
    )
    .on_conflict_do_nothing(index_elements=["concurrency_key"])
    .returning(_LANES.c.action_id)
)


@functools.cache
def _statement(linked: bool) -> Executable:
    """The chain of CTEs after the lane; ``linked`` when the invocation has a parent step
    to link."""
    founded = (
        insert(_ACTIONS)
        .from_select(
            ["id", *(column.name for column, _ in _COLUMNS)],
            select(
                bindparam("f_action_id", type_=BigInteger),
                *(bindparam(f"a_{name}", type_=column.type) for column, name in _COLUMNS),
            ),
            include_defaults=False,
        )
        .returning(_ACTIONS.c.id)
        .cte("founded")
    )
    achievements = cast(Table, Achievement.__table__)
    erased = (
        delete(achievements)
        .where(achievements.c.checksum_key == bindparam("f_erase_key"), exists(select(founded.c.id)))
        .cte("erased")
    )
    # The step's columns and what the statement writes in each.
    step = {
        "action_id": founded.c.id,
        "definition_index": bindparam("f_index"),
        "visit": literal_column("1"),
        "status": literal_column(f"'{status.STEP_PERFORMING}'"),
        "pending_actions_count": literal_column("0"),
        "unsuccessful_actions_count": literal_column("0"),
        "started_at": bindparam("f_now"),
        "created_at": bindparam("f_now"),
        "updated_at": bindparam("f_now"),
    }
    opened = (
        insert(_STEPS).from_select(list(step), select(*step.values())).returning(_STEPS.c.id).cte("opened")
    )
    invocations = cast(Table, Invocation.__table__)
    settled = (
        update(invocations)
        .where(invocations.c.id == bindparam("f_invocation_id"), exists(select(founded.c.id)))
        .values(
            settled_at=bindparam("f_now"),
            outcome=literal_column("'admitted'"),
            action_id=select(founded.c.id).scalar_subquery(),
        )
        .cte("settled")
    )
    statement = (
        select(founded.c.id, opened.c.id.label("step_id"))
        .select_from(founded.join(opened, true()))
        .add_cte(erased, settled)
    )
    if linked:
        link = (
            pg_insert(step_actions)
            .from_select(
                ["parent_step_id", "child_action_id"],
                select(bindparam("f_parent_step_id", type_=BigInteger), founded.c.id),
            )
            .on_conflict_do_nothing(index_elements=["parent_step_id", "child_action_id"])
            .cte("linked")
        )
        statement = statement.add_cte(link)
    return statement
