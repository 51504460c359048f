"""Claiming steps: the committed leases under which workers run step bodies.

A body runs holding its step's lease: no other worker runs it meanwhile, the sweeper does
not send it again, and a completion of its action (a cancel, a timeout, a completion from
outside) leaves the step to that body's outcome. A worker claims the steps it runs in its
process's shared batches (engine/group_commit.py), with their other transitions:

- the batch that makes steps ready in this process (an admission, a body's conclusion)
  claims, before it commits, those its units' threads run next (``claim_opened``): one
  statement sets ``leased_until`` on them and returns their rows; their actions and
  actors are mostly the ones the batch read already;
- a step sent by the broker is claimed in the next batch (``claim_all``): its row read
  with its action and locked by key, skipping rows another transaction locks, then
  claimed by key if it may be.

The body then runs in a session of its own made from those rows, with no statement: a
body that does not touch the database runs in no transaction at all, and its outcome
joins the process's next batch, where the conclusion sets ``performed_at`` and ends the
claim. A body that wrote commits its outcome with its writes, under its step's row lock
taken then (engine/conclusion.py).

A claim lasts ``LEASE_TIME`` (``STEPWISE_LEASE_SECONDS``, 60 by default). The process's
keeper extends the claims its threads hold while they run, so the claims of a worker lapse
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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from typing import Any, cast

from sqlalchemy import ARRAY, BigInteger, Table, bindparam, select, update
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from . import attempt, clock, db, group_commit, registry, rows, status
from .action import Action
from .group_commit import Unit
from .step import Step

log = logging.getLogger("stepwise")

#: How long a claim lasts unless its worker's keeper extends it.
LEASE_TIME = timedelta(seconds=float(os.environ.get("STEPWISE_LEASE_SECONDS", "60")))
#: The identity key of the action whose id is given (looked up once: ``inspect`` per step
#: took ~2 µs).
_ACTION_IDENTITY = sa_inspect(Action).identity_key_from_primary_key


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
    claimed = claim(session, sorted({unit.item for unit in units}))
    for unit in units:
        unit.result = claimed.pop(unit.item, None)


def claim_opened(session: Session, units: Sequence[Unit[Any]]) -> None:
    """Claim, for each unit's thread, the first ``claim_ready`` steps its transition opened,
    in the transaction that opened them (``group_commit.BEFORE_COMMIT``): each unit's
    ``claims``. The thread runs them next, with no claim of its own to wait for.

    The steps were opened by this transaction, so no other holds them: one statement
    claims them all and returns their rows, and their actions and actors are mostly the
    ones the transaction read already (those it did not are read together). A step whose
    action no longer performs, or whose attempts are durable, is left unclaimed."""
    wanted = {unit: unit.opened[: unit.claim_ready] for unit in units if unit.claim_ready and unit.opened}
    if not wanted:
        return
    now = clock.now()
    until = now + LEASE_TIME
    ids = sorted({step_id for ids in wanted.values() for step_id in ids})
    steps = _leased_returning(session, ids, now, until)
    actions = _actions_of(session, steps)
    claimed = {
        step.id: (step, actions[step.action_id])
        for step in steps
        if step.action_id in actions and _claimable(step, actions[step.action_id], now, claiming=True)
    }
    unclaimed = sorted(set(ids) - set(claimed))
    if unclaimed:
        _set_leases(session, unclaimed, None)
    made = _claims(session, claimed)
    for unit, ids in wanted.items():
        unit.claims = {step_id: made.pop(step_id) for step_id in ids if step_id in made}


def _leased_returning(session: Session, ids: list[int], now: datetime, until: datetime) -> list[Step]:
    """The steps ``ids`` claimed until ``until``, as the statement claiming them left them."""
    parameters = {"ids": ids, "until": until, "now": now}
    if session.get_bind().dialect.name == "postgresql":
        found = rows.read(session, _leased_reader, parameters, refresh=True)
        if found is not None:
            return [row[0] for row in found]
    statement = _leased_returning_statement(session.get_bind().dialect.name, Step)
    return list(session.scalars(statement, parameters, execution_options={"populate_existing": True}))


def _actions_of(session: Session, steps: list[Step]) -> dict[int, Action]:
    """The actions of ``steps``, by id: those the session holds (read or written in this
    transaction), the others read together."""
    held: dict[int, Action] = {}
    for step in steps:
        action = session.identity_map.get(_ACTION_IDENTITY((step.action_id,)))
        if action is not None:
            held[step.action_id] = action
    missing = sorted({step.action_id for step in steps} - set(held))
    if missing:
        held.update((action.id, action) for action in rows.by_ids(session, Action, missing))
    return held


@cache
def _leased_returning_statement(dialect: str, returning: Any) -> Any:
    """The claim of the steps ``ids`` until ``until``, returning ``returning``: the steps
    (the ORM), or their columns (``rows.Reader``)."""
    returned = (returning,) if returning is Step else tuple(rows.columns(Step))
    return (
        update(Step)
        .where(_named_in(dialect))
        .values(leased_until=bindparam("until"), updated_at=bindparam("now"))
        .returning(*returned)
        .execution_options(synchronize_session=False)
    )


@cache
def _leased_reader(dialect: Dialect) -> rows.Reader:
    return rows.Reader(_leased_returning_statement(dialect.name, "columns"), dialect, [Step])


def claim(session: Session, ids: list[int]) -> dict[int, Claim]:
    """Claim those of the steps ``ids`` that may be claimed, until ``LEASE_TIME`` from now:
    their claims, by step id.

    The steps are read with their actions and locked in id order, skipping those another
    transaction locks; which of them may be claimed is decided here, on the rows as
    locked, and one statement claims those by key. Every statement reaches its rows
    through the primary key: a condition on the step's state in SQL let the planner start
    from the partial index of unperformed steps, or from the performing actions, and read
    thousands of rows a call when statistics said there were none (engine/recordset.py)."""
    now = clock.now()
    locked = _lock(session, ids)
    claimed = {step.id: (step, action) for step, action in locked if _claimable(step, action, now)}
    if not claimed:
        return {}
    until = now + LEASE_TIME
    _set_leases(session, sorted(claimed), until)
    for step, _ in claimed.values():
        set_committed_value(step, "leased_until", until)
    return _claims(session, claimed)


def _claims(session: Session, claimed: dict[int, tuple[Step, Action]]) -> dict[int, Claim]:
    """The claims of the steps ``claimed`` (with their actions), each with its actor,
    every column of each row loaded (the body's session copies them: ``Claim.into``)."""
    actors = _actors(session, [action for _, action in claimed.values()])
    made = {step.id: Claim(step, action, actors.get(action.id)) for step, action in claimed.values()}
    for held in made.values():
        for row in (held.step, held.action, held.actor):
            if row is not None and not rows.loaded(row):
                session.refresh(row)  # written through the ORM in this transaction (SQLite)
    return made


def _claimable(step: Step, action: Action, now: datetime, claiming: bool = False) -> bool:
    """Whether the step may be claimed: the common case only (see the module's doc).
    ``claiming``: the step's row holds the claim being decided already."""
    return (
        step.performed_at is None
        and step.completed_at is None
        and step.status == status.STEP_PERFORMING
        and (step.retry_at is None or step.retry_at <= now)
        and (claiming or step.leased_until is None or step.leased_until <= now)
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
    """The rows of the actors of ``actions`` whose class is plain, by action id: those the
    batch's session holds already (read in this transaction: an admission's), the others
    read together."""
    wanted: dict[int, Any] = {}  # action id -> the identity key of its actor's row
    for action in actions:
        mapped = registry.mapped_key(action.actor_type, action.actor_id)
        if mapped is not None and rows.plain(mapped[0]):
            wanted[action.id] = registry.mapper_of(mapped[0]).identity_key_from_primary_key((mapped[1],))
    held = {identity: session.identity_map.get(identity) for identity in set(wanted.values())}
    missing = [(a.actor_type, a.actor_id) for a in actions if a.id in wanted and held[wanted[a.id]] is None]
    if missing:
        read = registry.load_actors(session, missing)
        held.update((sa_inspect(actor).identity_key, actor) for actor in read)
    found = {action_id: held.get(identity) for action_id, identity in wanted.items()}
    return {action_id: actor for action_id, actor in found.items() if actor is not None}


def _set_leases(session: Session, ids: list[int], until: datetime | None) -> None:
    """Set the claims of the steps ``ids`` (locked, or claimed by this process) to
    ``until``: a Core statement on the session's connection (~260 µs of CPU on
    PostgreSQL, where the ORM's handling of the same UPDATE, its compile state and
    autoflush, took ~410 µs). Nothing of those rows is pending in the session: they were
    just read through it, or the session is the keeper's own."""
    session.connection().execute(_leased(session.get_bind().dialect.name), {"ids": ids, "until": until})


@cache
def _leased(dialect: str) -> Any:
    """The statement that sets the claims of the steps ``ids`` (locked) to ``until``."""
    table = cast(Table, Step.__table__)
    return update(table).where(_named_in(dialect)).values(leased_until=bindparam("until"))


class Keeper:
    """Extends the claims of the bodies that this process runs while they run."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: The steps whose bodies run here, with when their claims lapse.
        self._held: dict[int, datetime] = {}
        self._thread: threading.Thread | None = None

    def hold(self, claims: Iterable[Claim]) -> None:
        """Extend ``claims`` before they lapse, until ``drop``."""
        with self._lock:
            for held in claims:
                self._held[held.step.id] = held.step.leased_until or clock.now()
            if self._held and self._thread is None:
                self._thread = threading.Thread(target=self._run, name="stepwise-keeper", daemon=True)
                self._thread.start()

    def drop(self, step_ids: Iterable[int]) -> None:
        """Stop extending the claims of ``step_ids``: their bodies' outcomes are recorded."""
        with self._lock:
            for step_id in step_ids:
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
            _set_leases(session, due, until)
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


def give_up(claims: dict[int, Claim]) -> None:
    """Give up claims whose bodies will not run here (the run before them failed), so that
    a message sent again runs them at once, not after they lapse."""
    keeper.drop(claims)
    try:
        with db.transaction() as session:
            _set_leases(session, sorted(claims), None)
    except Exception:
        log.exception("stepwise: could not give up the claims of steps %s", sorted(claims))


group_commit.BEFORE_COMMIT.append(claim_opened)
