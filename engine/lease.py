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
"""

from __future__ import annotations

from functools import cache
from typing import Any

from sqlalchemy import ARRAY, BigInteger, bindparam, select
from sqlalchemy import inspect as sa_inspect

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
