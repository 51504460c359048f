"""Bulk commands: cancel or retry every action matching a filter, server-side, in batches,
with progress, recorded once in the audit."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from functools import partial
from typing import Any

from sqlalchemy import ColumnElement, Select, String, cast, func, select
from sqlalchemy.orm import Session

from .. import audit, clock, db, history, status
from ..action import Action
from ..audit import AuditEntry
from ..step_body import dispatch_ready
from .cancel import cancel_tree
from .retry import reopen, reopen_down, reopen_up


@dataclass(frozen=True)
class ActionFilter:
    """What an operator filters actions by; every field is optional. The studio's list and
    the bulk commands share it."""

    status: str | None = None
    name: str | None = None
    actor_type: str | None = None
    actor_id: str | None = None
    concurrency_key: str | None = None
    roots_only: bool = False
    created_after: datetime | None = None
    created_before: datetime | None = None
    #: Text searched for in the JSON arguments.
    search: str | None = None

    def conditions(self) -> list[ColumnElement[bool]]:
        found: list[ColumnElement[bool]] = []
        if self.status:
            found.append(Action.status == self.status)
        if self.name:
            found.append(Action.name == self.name)
        if self.actor_type:
            found.append(Action.actor_type == self.actor_type)
        if self.actor_id:
            found.append(Action.actor_id == self.actor_id)
        if self.concurrency_key:
            found.append(Action.concurrency_key == self.concurrency_key)
        if self.roots_only:
            found.append(Action.root.is_(True))
        if self.created_after:
            found.append(Action.created_at >= self.created_after)
        if self.created_before:
            found.append(Action.created_at < self.created_before)
        if self.search:
            found.append(cast(Action.arguments_json, String).contains(self.search))
        return found

    def select_ids(self) -> Select[int]:
        return select(Action.id).where(*self.conditions())

    def describe(self) -> dict[str, Any]:
        return {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in asdict(self).items() if v}


COMMANDS = ("cancel", "retry")


def apply(
    session: Session,
    command: str,
    ids: list[int],
    eligible: frozenset[str],
    entry_id: int,
    by: str | None,
    reason: str | None,
) -> int:
    """One batch of a bulk command, in the caller's transaction; returns how many changed."""
    cause = history.OPERATOR
    changed = 0
    for action_id in ids:
        action = session.get(Action, action_id, populate_existing=True)
        if action is None or action.status not in eligible:
            continue  # changed since it was counted
        if command == "cancel":
            cancel_tree(session, action, cause=cause, by=by, reason=reason)
        else:
            reopen_down(session, action, cause=cause, by=by)
            reopen(session, action, cause=cause, by=by, reason=reason)
            reopen_up(session, action, cause=cause, by=by)
        changed += 1
        # Keep the identity map small: every autoflush scans it.
        session.flush()
        session.expunge_all()
    progress = session.get(AuditEntry, entry_id, populate_existing=True)
    assert progress is not None
    progress.done = (progress.done or 0) + len(ids)
    return changed


def bulk(
    command: str,
    where: ActionFilter,
    *,
    by: str | None = None,
    reason: str | None = None,
    batch_size: int = 500,
    on_progress: Callable[[AuditEntry], None] | None = None,
    on_start: Callable[[AuditEntry], None] | None = None,
) -> AuditEntry:
    """Apply ``cancel`` or ``retry`` to every action matching ``where``, ``batch_size`` per
    transaction, updating one audit entry's ``done``/``total`` as it goes. ``on_start`` is
    called with the audit entry once it is committed (with its ``total``), before the first
    batch: a caller running this in the background learns the entry's id at once."""
    if command not in COMMANDS:
        raise ValueError(f"bulk commands are {COMMANDS}, not {command!r}")
    eligible = status.INCOMPLETE if command == "cancel" else status.RETRYABLE
    matching = where.select_ids().where(Action.status.in_(eligible))
    cause = history.OPERATOR
    with db.session() as session:
        total = session.scalar(select(func.count()).select_from(matching.subquery())) or 0
        entry = audit.record(
            session, f"bulk_{command}", "filter", cause=cause, by=by, reason=reason, filter=where.describe()
        )
        entry.total, entry.done = total, 0
        session.commit()
        entry_id = entry.id
        if on_start is not None:
            on_start(entry)
        last_id = 0
        try:
            while True:
                ids = session.scalars(
                    matching.where(Action.id > last_id).order_by(Action.id).limit(batch_size)
                ).all()
                if not ids:
                    break
                batch = partial(apply, session, command, list(ids), eligible, entry_id, by, reason)
                db.retrying(session, batch)
                dispatch_ready(session)
                last_id = ids[-1]
                if on_progress is not None:
                    on_progress(session.get(AuditEntry, entry_id, populate_existing=True))  # type: ignore[arg-type]
        except Exception as error:
            # The batches done so far stay done; the audit says where and why it stopped.
            session.rollback()
            stopped = session.get(AuditEntry, entry_id, populate_existing=True)
            assert stopped is not None
            stopped.finished_at = clock.now()
            stopped.result = "error"
            stopped.data = {**stopped.data, "error": f"{type(error).__name__}: {error}"}
            session.commit()
            raise
        entry = session.get(AuditEntry, entry_id, populate_existing=True)  # type: ignore[assignment]
        entry.finished_at = clock.now()
        entry.result = "done"
        session.commit()
        session.refresh(entry)
        session.expunge(entry)
        return entry
