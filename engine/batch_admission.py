"""Admitting a batch: every invocation of a group-commit batch admitted with one lock of
their rows, one of their lanes and one founding of the lanes that do not exist yet.

``admit_all`` is the set-based form of ``admission.admit`` (engine/group_commit.py hands it
the items of every transition of a batch that admits: a worker's ``admit`` messages, and
the children its step bodies started). On PostgreSQL it takes, whatever the number of
invocations:

- one ``SELECT … FOR UPDATE`` of the invocations, in id order, with their parent steps'
  actions; one read of their actors per actor class;
- the user code of each (keys, checksum, timeout, ``before``), as ``admission.prepare``;
- one ``SELECT … FOR UPDATE`` of the lanes of their keys, in key order;
- two statements founding the lanes that do not exist (engine/founding.py).

An invocation whose lane exists, whose key another invocation of the batch founds, or
that has a checksum to look up goes through ``admission.obtain`` as before, after the
founders, in id order: the same outcome as admitting them one by one in id order. SQLite
admits them one by one.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from functools import cache
from typing import Any

from sqlalchemy import BigInteger, bindparam, select
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from . import founding, group_commit, local_runs, performance, registry, rows
from .action import Action
from .admission import LOCK_ALL, admit, obtain, prepare
from .group_commit import Unit
from .invocation import Invocation
from .step import Step

log = logging.getLogger("stepwise")


def admit_all(session: Session, units: Sequence[Unit[Any]]) -> None:
    """Admit the invocations each unit's ``item`` names (a sequence of ids); each unit's
    ``result`` is the list of what ``admission.admit`` returned for its ids. What an
    admission registers for after the commit (history aside) is its own unit's."""
    results = _admit(session, {invocation_id: unit for unit in units for invocation_id in unit.item})
    for unit in units:
        unit.result = [results[invocation_id] for invocation_id in unit.item]


def admit_due(session: Session, batch: Sequence[Unit[Any]]) -> None:
    """Admit the invocations the units of a batch made due (the children their bodies
    started: ``Unit.due``) in the batch's own transaction, rather than in a transition of
    their own once it committed (``running._admit_here``): a transaction, a lock of their
    rows and a wait for a batch fewer per body that starts children. As there, the unit's
    thread runs the first step they open (claimed with the unit's other steps); as many
    others as the process's pool has free threads for are claimed too and run there
    (``Unit.nearby``, engine/local_runs.py), and the rest go to the workers
    (``Unit.sends``), so that siblings run in parallel.

    If admitting them fails, a SAVEPOINT undoes it and the invocations are due after the
    commit, as before: the bodies' conclusions commit either way."""
    units = [unit for unit in batch if unit.due]
    if not units:
        return
    # Each unit's share of the admissions: its messages and later admissions its own, the
    # steps they open apart (the first is run here, the others sent).
    shares = {id(unit): Unit[Any](None) for unit in units}
    for unit in units:
        share = shares[id(unit)]
        share.after_commit, share.admissions = unit.after_commit, unit.admissions
    marks = [(unit, len(unit.after_commit), len(unit.admissions)) for unit in units]
    owners = {invocation_id: shares[id(unit)] for unit in units for invocation_id in unit.due or ()}
    # The batch's own changes first, outside the SAVEPOINT: an error of theirs (a deadlock,
    # a lost connection) is the batch's, to be retried as any, not the admissions'.
    session.flush()
    try:
        with session.begin_nested():
            admitted = _admit(session, owners)
    except Exception as error:
        if not session.is_active or (isinstance(error, DBAPIError) and error.connection_invalidated):
            raise  # the transaction itself is lost: the batch runs again (db.retrying_fresh)
        log.info(
            "admitting %d invocations with their parents' conclusions failed (%s): admitted after",
            sum(len(unit.due or ()) for unit in units),
            error,
        )
        for unit, callbacks, admissions in marks:
            del unit.after_commit[callbacks:]
            del unit.admissions[admissions:]
            unit.admissions.extend(unit.due or ())  # read once the batch committed
        return
    free = local_runs.pool.free()  # threads of the process's pool for the whole batch
    for unit in units:
        # Their actions (with their actors) stay in the session for the claims of the steps.
        unit.held.extend(admitted[invocation_id] for invocation_id in unit.due or ())
        opened = shares[id(unit)].opened
        if opened:
            # The first here; as many others as the process's pool has threads free for
            # claimed with it, for the pool (engine/local_runs.py); the rest sent.
            nearby = opened[1 : 1 + free]
            free -= len(nearby)
            unit.opened.append(opened[0])
            unit.opened.extend(nearby)
            unit.after_commit.append(functools.partial(unit.ready.append, opened[0]))
            unit.nearby.extend(nearby)
            unit.sends.extend(opened[1 + len(nearby) :])


def _admit(session: Session, owners: dict[int, Unit[Any]]) -> dict[int, Action | None]:
    """Admit the invocations ``owners`` names, each in its unit's ``collecting``: what
    ``admission.admit`` returned for each."""
    results: dict[int, Action | None] = {}
    if session.get_bind().dialect.name == "postgresql":
        _admit_on_postgres(session, owners, results)
    else:
        for invocation_id in sorted(owners):
            with owners[invocation_id].collecting(session):
                results[invocation_id] = admit(session, invocation_id)
    return results


def _admit_on_postgres(
    session: Session, owners: dict[int, Unit[Any]], results: dict[int, Action | None]
) -> None:
    locked = lock_all(session, sorted(owners))
    unsettled = [(invocation, parent) for invocation, parent in locked if invocation.settled_at is None]
    for invocation_id in owners:
        results[invocation_id] = None  # unknown, or settled already (a redelivery)
    # Read at once, and held here: the session's identity map keeps an object only while
    # something refers to it.
    actors = registry.load_actors(session, [(row[0].actor_type, row[0].actor_id) for row in unsettled])
    candidates: list[tuple[Action, Invocation]] = []
    for invocation, parent in unsettled:
        with owners[invocation.id].collecting(session):
            candidate, settled = prepare(session, invocation, parent)
        if settled:
            results[invocation.id] = candidate
        else:
            candidates.append((candidate, invocation))
    del actors
    lanes = performance.lock_all(session, {candidate.concurrency_key for candidate, _ in candidates})
    # The first invocation of each key with no lane founds it, unless one of that key
    # has a checksum to look up first: its key is admitted one by one, in id order.
    looked_up = {candidate.concurrency_key for candidate, _ in candidates if candidate.checksum is not None}
    founders: list[tuple[Action, Invocation]] = []
    others: list[tuple[Action, Invocation]] = []
    taken = set(lanes) | looked_up
    for candidate, invocation in candidates:
        if candidate.concurrency_key in taken:
            others.append((candidate, invocation))
        else:
            founders.append((candidate, invocation))
            taken.add(candidate.concurrency_key)
    step_ids = founding.found_all(session, founders)
    for (candidate, invocation), step_id in zip(founders, step_ids, strict=True):
        with owners[invocation.id].collecting(session):
            if step_id is None:  # another transaction founded the lane meanwhile
                results[invocation.id] = obtain(session, candidate, invocation)
            else:
                founding.record(session, candidate, invocation, step_id)
                results[invocation.id] = candidate
    for candidate, invocation in others:
        with owners[invocation.id].collecting(session):
            results[invocation.id] = obtain(session, candidate, invocation)


def lock_all(session: Session, invocation_ids: list[int]) -> list[Any]:
    """``LOCK_ALL``: each invocation with its parent step's action (None for a root),
    read through psycopg alone where it can be (engine/rows.py), the objects the session
    holds refreshed, as ``LOCK_ALL``'s ``populate_existing`` does."""
    found = rows.read(session, _lock_all_reader, {"ids": invocation_ids}, refresh=True)
    return found if found is not None else list(session.execute(LOCK_ALL, {"ids": invocation_ids}).all())


@cache
def _lock_all_reader(dialect: Dialect) -> rows.Reader:
    statement: Any = select(*rows.columns(Invocation), *rows.columns(Action))
    statement = statement.outerjoin(Step, Step.id == Invocation.parent_step_id)
    statement = statement.outerjoin(Action, Action.id == Step.action_id)
    statement = statement.where(Invocation.id == bindparam("ids", type_=ARRAY(BigInteger)).any_())
    statement = statement.order_by(Invocation.id).with_for_update(of=Invocation)
    return rows.Reader(statement, dialect, [Invocation, Action])


group_commit.ADMIT_DUE.append(admit_due)
