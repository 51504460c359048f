"""Concluding waiters on PostgreSQL in one statement: the invocations that waited on an
action are marked concluded and their steps' counters decremented together
(data-modifying CTEs), and the steps come back as that UPDATE left them.

``completion.conclude_waiters`` uses it on PostgreSQL, and a batch concluding many actions
at once uses it for all of them (``conclude_waiters_of``); on SQLite (no DML in a CTE) it marks
the invocations (``concluded_waiters``) and then decrements each step in a statement of its
own. The guard is the same as ``step.decrement``'s: a step whose counter would go below
zero is not decremented, and ``NoPendingActions`` says so (the whole transaction is then
rolled back, the invocations' UPDATE with it).

A worker sends it for nearly every completion, so it goes through psycopg alone where it
can (engine/rows.py): the steps are made from its rows, and a step the session holds
already is refreshed in place, as ``populate_existing`` would, since a statement that
writes cannot be sent a second time through the ORM.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from functools import cache
from typing import Any

from sqlalchemy import ARRAY, BigInteger, Select, bindparam, func, select, update
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import Session
from sqlalchemy.sql.dml import ReturningUpdate

from . import rows
from .errors import NoPendingActions
from .invocation import Invocation
from .step import Step


def _mark_waiters(many: bool) -> ReturningUpdate[Any]:
    """The invocations waiting on an action (``many``: on any of the actions
    ``b_action_ids``, PostgreSQL), marked concluded: their parent steps' ids and the
    actions they waited on."""
    invocations = Invocation.__table__.c
    waited_on = (
        invocations.action_id == bindparam("b_action_ids", type_=ARRAY(BigInteger)).any_()
        if many
        else invocations.action_id == bindparam("b_action_id")
    )
    return (
        update(Invocation.__table__)  # type: ignore[arg-type]
        .where(waited_on, invocations.concluded_at.is_(None), invocations.parent_step_id.is_not(None))
        .values(concluded_at=bindparam("b_now"), succeeded=bindparam("b_succeeded"))
        .returning(invocations.parent_step_id, invocations.action_id)
    )


_MARK_WAITERS = _mark_waiters(many=False)


def _rows() -> Select[Any]:
    """The statement's rows: each waiting step's columns (``rows.columns(Step)``) as the
    decrement left them (NULLs where it was not decremented), its id, how many of its
    children concluded, and the lowest id of those."""
    steps = Step.__table__.c
    waiters = _mark_waiters(many=True).cte("waiters")
    counts = (
        select(
            waiters.c.parent_step_id.label("waiting_step_id"),
            func.count().label("waiting_count"),
            func.min(waiters.c.action_id).label("waiting_for"),
        )
        .group_by(waiters.c.parent_step_id)
        .cte("counts")
    )
    decremented = (
        update(Step.__table__)  # type: ignore[arg-type]
        .where(steps.id == counts.c.waiting_step_id, steps.pending_actions_count >= counts.c.waiting_count)
        .values(
            pending_actions_count=steps.pending_actions_count - counts.c.waiting_count,
            unsuccessful_actions_count=steps.unsuccessful_actions_count
            + counts.c.waiting_count * bindparam("b_failing"),
            updated_at=bindparam("b_now"),
        )
        .returning(*rows.columns(Step))
        .cte("decremented")
    )
    return (
        select(*decremented.c, counts.c.waiting_step_id, counts.c.waiting_count, counts.c.waiting_for)
        .select_from(counts.outerjoin(decremented, decremented.c.id == counts.c.waiting_step_id))
        .order_by(counts.c.waiting_step_id)
        .execution_options(autoflush=False)
    )


_ROWS = _rows()
_CONCLUDE_WAITERS = (
    select(Step, *list(_ROWS.selected_columns)[-3:])
    .from_statement(_ROWS)
    .execution_options(populate_existing=True, autoflush=False)
)


@cache
def _reader(dialect: Dialect) -> rows.Reader:
    return rows.Reader(_ROWS, dialect, [Step])


def conclude_waiters(session: Session, action_id: int, succeeded: bool, now: object) -> list[Step]:
    """Mark the invocations waiting on ``action_id`` concluded and decrement their steps:
    those steps, by id, as the decrement left them."""
    return [step for step, _ in conclude_waiters_of(session, [action_id], succeeded, now)]


def conclude_waiters_of(
    session: Session, action_ids: list[int], succeeded: bool, now: object
) -> list[tuple[Step, int]]:
    """``conclude_waiters`` for many actions that completed alike, in one statement: each
    step, by id, with the (lowest) id of the actions it waited on."""
    parameters = {"b_action_ids": action_ids, "b_now": now, "b_succeeded": succeeded}
    parameters["b_failing"] = 0 if succeeded else 1
    concluded: list[tuple[Step, int]] = []
    # Read through psycopg alone where it can be; the statement writes, so steps the
    # session holds are refreshed in place rather than read again (engine/rows.py).
    found: Sequence[Sequence[Any]] | None = rows.read(session, _reader, parameters, refresh=True)
    if found is None:
        found = session.execute(_CONCLUDE_WAITERS, parameters).all()
    for step, step_id, count, waited_for in found:
        if step is None:
            raise NoPendingActions(f"step {step_id} waits on fewer than {count} children")
        concluded.append((step, waited_for))
    return concluded


def concluded_waiters(
    session: Session, action_id: int, succeeded: bool, now: object
) -> list[tuple[int, int]]:
    """Mark the invocations waiting on ``action_id`` concluded (SQLite): how many waited
    in each step, by step id, for the caller to decrement."""
    rows = session.connection().execute(
        _MARK_WAITERS, {"b_action_id": action_id, "b_now": now, "b_succeeded": succeeded}
    )
    return sorted(Counter(row[0] for row in rows if row[0] is not None).items())
