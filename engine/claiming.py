"""Claiming steps: the committed leases under which workers run step bodies.

A body runs holding its step's lease: no other worker runs it meanwhile, the sweeper does
not send it again, and a completion of its action (a cancel, a timeout, a completion from
outside) leaves the step to that body's outcome. A worker claims the steps it is about to
run in its process's shared batch (engine/group_commit.py), with that batch's other
transitions: one statement sets ``leased_until`` on every step of the batch it may claim,
and the steps, their actions and their actors are read in one more each (one per actor
class). The body then runs in a session of its own made from those rows, with no
statement: a body that does not touch the database runs in no transaction at all, and its
outcome joins the process's next batch, where the conclusion sets ``performed_at`` and
the claim no longer matters. A body that wrote commits its outcome with its writes, under
its step's row lock taken then (engine/conclusion.py).

A claim lasts ``LEASE_TIME`` (``STEPWISE_LEASE_SECONDS``, 60 by default). The process's
keeper extends the claims of the bodies that run longer, so the claims of a worker lapse
only when it dies, and the sweeper then sends their steps again.

Only the common case is claimed: a step opened and not performed, its action performing,
its retry due, its attempts not durable, its row not locked. Anything else (a redelivery,
a step another worker holds, an early retry, a durable step, an action completed
meanwhile) is left unclaimed, and its runner takes the step's row lock as before
(engine/lease.py, ``step_body.perform``), which sees what there is to do: a live claim
there means another worker runs the body.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from typing import Any

from sqlalchemy import ARRAY, BigInteger, bindparam, exists, or_, select, update
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.orm import Session

from . import attempt, clock, db, lease, registry, rows, status
from .action import Action
from .group_commit import Unit
from .step import Step, unclaimed

log = logging.getLogger("stepwise")

#: How long a claim lasts unless its worker's keeper extends it.
LEASE_TIME = timedelta(seconds=float(os.environ.get("STEPWISE_LEASE_SECONDS", "60")))


@dataclass
class Claim:
    """A claimed step, its action and its actor's row (None: the body reads its actor:
    a service object, or a class whose loading does more than set its columns), as the
    batch that claimed them read them."""

    step: Step
    action: Action
    actor: Any

    def into(self, session: Session) -> tuple[Step, Action, Any]:
        """Copies of the rows, persistent in ``session`` (no statement)."""
        step, action, actor = rows.copies(session, [self.step, self.action, self.actor])
        return step, action, actor


def claim_all(session: Session, units: Sequence[Unit[Any]]) -> None:
    """Claim the step each unit's ``item`` names, until ``LEASE_TIME`` from now: each
    unit's result is its ``Claim``, or None when the step is not claimed (see the module's
    doc). A step named twice is claimed for the first unit only."""
    now = clock.now()
    ids = sorted({unit.item for unit in units})
    statement = _claim(session.get_bind().dialect.name)
    claimed = list(session.scalars(statement, {"ids": ids, "now": now, "until": now + LEASE_TIME}))
    found = {step.id: (step, action) for step, action in _read(session, sorted(claimed))} if claimed else {}
    durable = sorted(step_id for step_id, (step, action) in found.items() if attempt.durable(action, step))
    if durable:  # engine/durable.py runs those, under the row lock
        session.execute(_release(session.get_bind().dialect.name), {"ids": durable})
        for step_id in durable:
            del found[step_id]
    actors = _actors(session, [action for _, action in found.values()])
    for unit in units:
        row = found.pop(unit.item, None)
        unit.result = None if row is None else Claim(*row, actors.get(row[1].id))


def _read(session: Session, ids: list[int]) -> list[Any]:
    """The steps ``ids`` (locked by this transaction already) with their actions, read afresh."""
    if session.get_bind().dialect.name == "postgresql":
        return lease.lock_all(session, ids)
    statement = select(Step, Action).join(Action, Action.id == Step.action_id).where(Step.id.in_(ids))
    return list(session.execute(statement.execution_options(populate_existing=True)).all())


def _actors(session: Session, actions: list[Action]) -> dict[int, Any]:
    """The rows of the actors of ``actions`` whose class is plain, read together, by action id."""
    wanted: dict[int, tuple[type, Any]] = {}
    for action in actions:
        mapped = registry.mapped_key(action.actor_type, action.actor_id)
        if mapped is not None and rows.plain(mapped[0]):
            wanted[action.id] = mapped
    if not wanted:
        return {}
    read = registry.load_actors(session, [(action.actor_type, action.actor_id) for action in actions])
    by_identity = {sa_inspect(actor).identity_key: actor for actor in read}
    found: dict[int, Any] = {}
    for action_id, (cls, key) in wanted.items():
        actor = by_identity.get(sa_inspect(cls).identity_key_from_primary_key((key,)))
        if actor is not None:
            found[action_id] = actor
    return found


@cache
def _claim(dialect: str) -> Any:
    """The statement claiming the steps ``ids`` that may be claimed at ``now`` until
    ``until``, skipping rows another transaction locks: the ids claimed."""
    now: Any = bindparam("now")
    performing = exists().where(Action.id == Step.action_id, Action.status == status.PERFORMING)
    candidates = (
        select(Step.id)
        .where(
            _named(dialect),
            Step.performed_at.is_(None),
            Step.completed_at.is_(None),
            Step.status == status.STEP_PERFORMING,
            or_(Step.retry_at.is_(None), Step.retry_at <= now),
            unclaimed(now),
            performing,
        )
        .with_for_update(of=Step, skip_locked=True)
    )
    return (
        update(Step)
        .where(Step.id.in_(candidates))
        .values(leased_until=bindparam("until"))
        .returning(Step.id)
        .execution_options(synchronize_session=False)
    )


@cache
def _release(dialect: str) -> Any:
    """The statement that gives up the claims of the steps ``ids`` not performed."""
    return (
        update(Step)
        .where(_named(dialect), Step.performed_at.is_(None))
        .values(leased_until=None)
        .execution_options(synchronize_session=False)
    )


def release(session: Session, step_id: int) -> None:
    """Give up the claim on step ``step_id`` if its body's outcome was not recorded (its
    run failed unhandled): a message retried runs it at once, not after the claim lapses."""
    session.execute(_release(session.get_bind().dialect.name), {"ids": [step_id]})


class Keeper:
    """Extends the claims of the bodies that this process runs while they run."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: The steps whose bodies run here, with when their claims lapse.
        self._held: dict[int, datetime] = {}
        self._thread: threading.Thread | None = None

    @contextmanager
    def holding(self, claim: Claim) -> Iterator[None]:
        """Inside the block, the claim is extended before it lapses."""
        step_id = claim.step.id
        with self._lock:
            self._held[step_id] = claim.step.leased_until or clock.now()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="stepwise-keeper", daemon=True)
                self._thread.start()
        try:
            yield
        finally:
            with self._lock:
                self._held.pop(step_id, None)

    def _run(self) -> None:
        while True:
            threading.Event().wait(LEASE_TIME.total_seconds() / 4)
            try:
                self.extend()
            except Exception:
                log.exception("stepwise: could not extend the claims of running steps")

    def extend(self) -> list[int]:
        """Extend the claims that lapse within half of ``LEASE_TIME``: their step ids."""
        now = clock.now()
        with self._lock:
            due = sorted(step_id for step_id, until in self._held.items() if until - now < LEASE_TIME / 2)
        if not due:
            return []
        until = now + LEASE_TIME
        with db.transaction() as session:
            session.execute(_extend(session.get_bind().dialect.name), {"ids": due, "until": until})
        with self._lock:
            for step_id in due:
                if step_id in self._held:
                    self._held[step_id] = until
        return due


@cache
def _extend(dialect: str) -> Any:
    return (
        update(Step)
        .where(_named(dialect), Step.performed_at.is_(None))
        .values(leased_until=bindparam("until"))
        .execution_options(synchronize_session=False)
    )


def _named(dialect: str) -> Any:
    """The condition that the step is one of ``ids``."""
    if dialect == "postgresql":
        return Step.id == bindparam("ids", type_=ARRAY(BigInteger)).any_()
    return Step.id.in_(bindparam("ids", expanding=True))


keeper = Keeper()
