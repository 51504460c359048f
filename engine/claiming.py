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

from sqlalchemy import ARRAY, BigInteger, bindparam, select, update
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from . import attempt, clock, db, registry, rows, status
from .action import Action
from .group_commit import Unit
from .step import Step

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
    doc). A step named twice is claimed for the first unit only.

    The steps are read with their actions and locked in id order, skipping those another
    transaction locks; which of them may be claimed is decided here, on the rows as
    locked, and one statement claims those by key. Every statement reaches its rows
    through the primary key: a condition on the step's state in SQL let the planner start
    from the partial index of unperformed steps, or from the performing actions, and read
    thousands of rows a call when statistics said there were none (engine/recordset.py)."""
    now = clock.now()
    found = {
        step.id: (step, action) for step, action in _lock(session, sorted({unit.item for unit in units}))
    }
    claimed = {step_id: row for step_id, row in found.items() if _claimable(*row, now)}
    if claimed:
        until = now + LEASE_TIME
        session.execute(_leased(session.get_bind().dialect.name), {"ids": sorted(claimed), "until": until})
        for step, _ in claimed.values():
            set_committed_value(step, "leased_until", until)
    actors = _actors(session, [action for _, action in claimed.values()])
    for unit in units:
        row = claimed.pop(unit.item, None)
        unit.result = None if row is None else Claim(*row, actors.get(row[1].id))


def _claimable(step: Step, action: Action, now: datetime) -> bool:
    """Whether the step may be claimed: the common case only (see the module's doc)."""
    return (
        step.performed_at is None
        and step.completed_at is None
        and step.status == status.STEP_PERFORMING
        and (step.retry_at is None or step.retry_at <= now)
        and (step.leased_until is None or step.leased_until <= now)
        and action.status == status.PERFORMING
        and not attempt.durable(action, step)  # engine/durable.py runs those, under the row lock
    )


def _lock(session: Session, ids: list[int]) -> list[Any]:
    """The steps ``ids`` with their actions, read afresh, locked in id order, without those
    another transaction locks (SQLite: under the batch's write lock)."""
    if session.get_bind().dialect.name == "postgresql":
        found = rows.read(session, _lock_reader, {"ids": ids}, refresh=True)
        if found is not None:
            return found
    named = _named_in(session.get_bind().dialect.name)
    statement = select(Step, Action).join(Action, Action.id == Step.action_id).where(named)
    statement = statement.order_by(Step.id).with_for_update(of=Step, skip_locked=True)
    return list(session.execute(statement.execution_options(populate_existing=True), {"ids": ids}).all())


@cache
def _lock_reader(dialect: Dialect) -> rows.Reader:
    statement: Any = select(*rows.columns(Step), *rows.columns(Action))
    statement = statement.join_from(Step, Action, Action.id == Step.action_id).where(_named_in(dialect.name))
    return rows.Reader(
        statement.order_by(Step.id).with_for_update(of=Step, skip_locked=True), dialect, [Step, Action]
    )


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
def _leased(dialect: str) -> Any:
    """The statement that sets the claims of the steps ``ids`` (locked) to ``until``."""
    return (
        update(Step)
        .where(_named_in(dialect))
        .values(leased_until=bindparam("until"))
        .execution_options(synchronize_session=False)
    )


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
            session.execute(_leased(session.get_bind().dialect.name), {"ids": due, "until": until})
        with self._lock:
            for step_id in due:
                if step_id in self._held:
                    self._held[step_id] = until
        return due


def _named_in(dialect: str) -> Any:
    """The condition that the step is one of ``ids``."""
    if dialect == "postgresql":
        return Step.id == bindparam("ids", type_=ARRAY(BigInteger)).any_()
    return Step.id.in_(bindparam("ids", expanding=True))


keeper = Keeper()
