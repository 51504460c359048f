"""Bulk commands as durable engine work: ``start`` records the command's audit entry and its
run (``BulkRun``) and sends the ``stepwise.bulk_run`` job after commit; the job works through
the matching actions in batches, each batch one transaction that also advances the run's
cursor, and hands itself on to a new message every ``SLICE`` so no message runs for long.

Nothing lives in the process that started it: a web process that restarts neither loses
nor orphans a bulk command, a worker that dies mid-batch leaves the batch undone (its
redelivered message resumes at the cursor), and a run whose message was lost is sent again
by ``resend_stale`` (the sweeper's to call).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, func, select, update
from sqlalchemy.orm import Session

from . import audit, broker, clock, db, history, status
from .action import Action
from .audit import AuditEntry
from .bulk_run import BulkRun
from .commands.bulk import ActionFilter, apply
from .step_body import dispatch_ready

log = logging.getLogger("stepwise")

#: The job's message name (engine/jobs.py declares it).
BULK_RUN = "stepwise.bulk_run"
#: Actions per batch (per transaction).
BATCH_SIZE = 500
#: How long one message works before it hands the rest to a new one.
SLICE = timedelta(seconds=20)
#: An unfinished run that has not moved for this long is sent again.
STALE = timedelta(minutes=2)
#: The statuses each command changes.
ELIGIBLE: dict[str, frozenset[str]] = {"cancel": status.INCOMPLETE, "retry": status.RETRYABLE}


@dataclass(frozen=True)
class BulkFilter(ActionFilter):
    """The operator's filter, and what the studio also filters by: the class of the error an
    action raised, outbound actions only, and a selection of ids (the rows ticked)."""

    error_class: str | None = None
    outbound_only: bool = False
    ids: tuple[int, ...] = ()

    def conditions(self) -> list[ColumnElement[bool]]:
        found = super().conditions()
        if self.error_class:
            found.append(Action.error_class == self.error_class)
        if self.outbound_only:
            found.append(Action.outbound.is_(True))
        if self.ids:
            found.append(Action.id.in_(self.ids))
        return found

    @classmethod
    def from_description(cls, data: dict[str, Any]) -> BulkFilter:
        """The filter ``describe()`` wrote (a run's, an audit entry's)."""
        names = {f.name for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        for name, value in data.items():
            if name not in names:
                continue
            if name in ("created_after", "created_before") and isinstance(value, str):
                value = datetime.fromisoformat(value)
            elif name == "ids":
                value = tuple(int(i) for i in value)
            values[name] = value
        return cls(**values)


def start(command: str, where: ActionFilter, *, by: str | None = None, reason: str | None = None) -> int:
    """Record the bulk command (its audit entry, with the count of what it may change as its
    ``total``) and its run, send the job after commit, and return the audit entry's id."""
    if command not in ELIGIBLE:
        raise ValueError(f"bulk commands are {sorted(ELIGIBLE)}, not {command!r}")
    matching = where.select_ids().where(Action.status.in_(sorted(ELIGIBLE[command])))
    described = where.describe()
    with db.session() as session:

        def work() -> int:
            total = session.scalar(select(func.count()).select_from(matching.subquery())) or 0
            entry = audit.record(
                session,
                f"bulk_{command}",
                "filter",
                cause=history.OPERATOR,
                by=by,
                reason=reason,
                filter=described,
            )
            entry.total, entry.done = total, 0
            session.flush()
            run = BulkRun(audit_entry_id=entry.id, command=command, filter=described, by=by, reason=reason)
            session.add(run)
            session.flush()
            broker.enqueue(session, BULK_RUN, run.id)
            log.info("bulk_%s started run=%s entry=%s by=%s total=%s", command, run.id, entry.id, by, total)
            return entry.id

        return db.retrying(session, work)


def run(run_id: int, *, batch_size: int = BATCH_SIZE, budget: timedelta = SLICE) -> None:
    """The job: batches from the run's cursor until it is finished, or ``budget`` has passed
    (then a new message goes on from the cursor). A second delivery of the same message is
    harmless: batches take the run's row lock and re-read the cursor."""
    deadline = time.monotonic() + budget.total_seconds()
    with db.session() as session:
        try:
            while _batch(session, run_id, batch_size):
                dispatch_ready(session)
                if time.monotonic() >= deadline:
                    broker.send(BULK_RUN, run_id)
                    return
            dispatch_ready(session)
        except Exception as error:
            session.rollback()
            log.exception("bulk run %s stopped on an error", run_id)
            _stop(session, run_id, error)


def _batch(session: Session, run_id: int, size: int) -> bool:
    """One batch in one transaction; False once the run is finished (or gone)."""

    def work() -> bool:
        found = session.scalars(
            select(BulkRun)
            .where(BulkRun.id == run_id)
            .with_for_update()
            .execution_options(populate_existing=True)
        ).one_or_none()
        if found is None or found.finished_at is not None:
            return False
        eligible = ELIGIBLE[found.command]
        entry_id, command, by, reason = found.audit_entry_id, found.command, found.by, found.reason
        matching = BulkFilter.from_description(found.filter).select_ids()
        ids = session.scalars(
            matching.where(Action.status.in_(sorted(eligible)), Action.id > found.last_id)
            .order_by(Action.id)
            .limit(size)
        ).all()
        now = clock.now()
        if not ids:
            this_run = update(BulkRun).where(BulkRun.id == run_id)
            session.execute(this_run.values(finished_at=now, updated_at=now))
            session.execute(
                update(AuditEntry).where(AuditEntry.id == entry_id).values(finished_at=now, result="done")
            )
            log.info("bulk_%s finished run=%s entry=%s", command, run_id, entry_id)
            return False
        apply(session, command, list(ids), eligible, entry_id, by, reason)
        session.execute(update(BulkRun).where(BulkRun.id == run_id).values(last_id=ids[-1], updated_at=now))
        return True

    return db.retrying(session, work)


def _stop(session: Session, run_id: int, error: Exception) -> None:
    """The batches done so far stay done; the run and its audit entry say where and why."""
    said = f"{type(error).__name__}: {error}"
    found = session.get(BulkRun, run_id, populate_existing=True)
    if found is None:
        return
    now = clock.now()
    found.finished_at, found.error = now, said
    entry = session.get(AuditEntry, found.audit_entry_id, populate_existing=True)
    if entry is not None:
        entry.finished_at, entry.result = now, "error"
        entry.data = {**(entry.data or {}), "error": said}
    session.commit()


def stale(session: Session, older_than: timedelta = STALE) -> list[int]:
    """Unfinished runs that have not moved for ``older_than``."""
    since = clock.now() - older_than
    unfinished = select(BulkRun.id).where(BulkRun.finished_at.is_(None), BulkRun.updated_at < since)
    return list(session.scalars(unfinished.order_by(BulkRun.id)))


def resend_stale(session: Session, older_than: timedelta = STALE) -> list[int]:
    """Send the stale runs again (their message was lost, or their worker died and its
    broker does not redeliver); returns their ids. A run that is in fact still going is
    unharmed: its batches and the new message's take turns on the run's row lock."""
    ids = stale(session, older_than)
    if ids:
        session.execute(update(BulkRun).where(BulkRun.id.in_(ids)).values(updated_at=clock.now()))
        for run_id in ids:
            broker.enqueue(session, BULK_RUN, run_id)
        session.commit()
    return ids


def run_of(session: Session, entry_id: int) -> BulkRun | None:
    """The run of a bulk command's audit entry (None: it ran the old way, in one process)."""
    return session.scalars(select(BulkRun).where(BulkRun.audit_entry_id == entry_id)).one_or_none()
