"""A step's lease: its row lock, read with its action's row.

A body runs holding its step's lease (``LEASE``: a step whose lease another worker holds is
skipped, not waited for; that worker runs it). Its outcome is recorded under the same lock
(``LOCK``: it waits only for a lease on the step), and a group-commit batch takes the
locks of all the steps it concludes at once, in id order (``LOCK_ALL``,
engine/batch_conclusion.py). Each reads the rows afresh (``populate_existing``): a
session's copy may be an earlier transaction's.

A worker often knows whose step it is about to run: the children a body starts, and the
next step of a tree, are mostly on the same actor as the body before. ``lease_with_actor``
takes the lease and reads that guessed actor's row in the same statement, so the body
starts without a query of its own; a wrong guess costs one row read, and the actor is read
as usual.

A worker takes a lease for nearly every action, each in a session of its own, so on
PostgreSQL ``take`` sends that statement through psycopg alone and makes the objects from
its row (engine/rows.py), unless the actor's class is not plain or the session holds one
of the rows already: then the ORM reads them.
"""

from __future__ import annotations

from functools import cache, partial
from typing import Any

from sqlalchemy import ARRAY, BigInteger, bindparam, select
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import Session

from . import rows
from .action import Action
from .step import Step


def _locked(skip_locked: bool) -> Any:
    return (
        select(Step, Action)
        .join(Action, Action.id == Step.action_id)
        .with_for_update(of=Step, skip_locked=skip_locked)
        .execution_options(populate_existing=True)
    )


#: The step ``step_id`` with its action, its lease taken unless another holds it.
LEASE = _locked(skip_locked=True).where(Step.id == bindparam("step_id"))
#: The step ``step_id`` with its action, waiting for its lease if another holds it.
LOCK = _locked(skip_locked=False).where(Step.id == bindparam("step_id"))
#: PostgreSQL: the steps ``ids`` with their actions, locked in id order.
LOCK_ALL = (
    _locked(skip_locked=False)
    .where(Step.id == bindparam("ids", type_=ARRAY(BigInteger)).any_())
    .order_by(Step.id)
)


@cache
def lease_with_actor(cls: type) -> Any:
    """``LEASE`` that also reads the row of ``cls`` whose primary key is ``actor_key`` (None
    when there is none): (step, action, actor)."""
    key: Any = sa_inspect(cls).primary_key[0]
    return LEASE.add_columns(cls).outerjoin(cls, key == bindparam("actor_key", type_=key.type))


def take(session: Session, step_id: int, actor_class: type | None = None, actor_key: Any = None) -> Any:
    """The lease of step ``step_id`` taken in ``session``: ``(step, action, actor)``, the
    actor being the row of ``actor_class`` keyed ``actor_key`` (None when no class is given
    or no such row exists); None when another holds the lease or the step is gone."""
    parameters = {"step_id": step_id, "actor_key": actor_key}
    if actor_class is None or rows.plain(actor_class):
        found = rows.read(session, partial(_reader, actor_class=actor_class), parameters, refresh=True)
        if found is not None:
            if not found:
                return None  # another holds the lease, or the step is gone
            step, action, *actor = found[0]
            return step, action, actor[0] if actor else None
    if actor_class is None:
        row = session.execute(LEASE, {"step_id": step_id}).one_or_none()
        return None if row is None else (*row, None)
    # unique(): the actor's class may load a collection with a join (lazy="joined")
    return session.execute(lease_with_actor(actor_class), parameters).unique().one_or_none()


def lock_all(session: Session, step_ids: list[int]) -> list[Any]:
    """``LOCK_ALL``: the steps ``step_ids`` with their actions, locked in id order."""
    found = rows.read(session, _lock_all_reader, {"ids": step_ids}, refresh=True)
    return found if found is not None else list(session.execute(LOCK_ALL, {"ids": step_ids}).all())


@cache
def _lock_all_reader(dialect: Dialect) -> rows.Reader:
    statement: Any = select(*rows.columns(Step), *rows.columns(Action))
    statement = statement.join_from(Step, Action, Action.id == Step.action_id)
    statement = statement.where(Step.id == bindparam("ids", type_=ARRAY(BigInteger)).any_())
    return rows.Reader(statement.order_by(Step.id).with_for_update(of=Step), dialect, [Step, Action])


@cache
def _reader(dialect: Dialect, actor_class: type | None) -> rows.Reader:
    """``LEASE`` (with the row of ``actor_class`` keyed ``actor_key``, if given) for
    ``rows.Reader``."""
    classes: list[type] = [Step, Action] if actor_class is None else [Step, Action, actor_class]
    statement: Any = select(*(column for cls in classes for column in rows.columns(cls)))
    statement = statement.join_from(Step, Action, Action.id == Step.action_id)
    if actor_class is not None:
        key: Any = sa_inspect(actor_class).primary_key[0]
        statement = statement.outerjoin(actor_class, key == bindparam("actor_key", type_=key.type))
    statement = statement.where(Step.id == bindparam("step_id")).with_for_update(of=Step, skip_locked=True)
    return rows.Reader(statement, dialect, classes)
