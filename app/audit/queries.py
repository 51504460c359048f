"""The read model of the audit: every operator command and webhook completion, newest first,
a page at a time (keyset on the id), filtered by command or by user through their indexes
(ix_stepwise_audit_entries_command and _by), and by a time-range preset (``at`` since then).
It only reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from engine.models import AuditEntry

PAGE = 50
#: The commands the engine and the studio audit (engine.commands, and the catalog's start).
COMMANDS = (
    "approve",
    "reject",
    "complete",
    "cancel",
    "retry",
    "skip",
    "signal",
    "forget",
    "bulk_cancel",
    "bulk_retry",
    "start",
    "user_create",
    "user_role",
    "user_disable",
    "user_enable",
    "schedule_create",
    "schedule_edit",
    "schedule_pause",
    "schedule_resume",
    "schedule_trigger",
    "schedule_delete",
    "schedule_sync",
)


@dataclass
class Page:
    entries: list[AuditEntry]
    #: The id to continue before, when there are older entries.
    next_before: int | None


def entries(
    session: Session,
    *,
    command: str | None = None,
    by: str | None = None,
    before: int | None = None,
    since: datetime | None = None,
    limit: int | None = None,
) -> Page:
    limit = limit or PAGE
    query = select(AuditEntry).order_by(AuditEntry.id.desc()).limit(limit + 1)
    if command:
        query = query.where(AuditEntry.command == command)
    if by:
        query = query.where(AuditEntry.by == by)
    if before is not None:
        query = query.where(AuditEntry.id < before)
    if since is not None:
        query = query.where(AuditEntry.at >= since)
    found = list(session.scalars(query))
    more = len(found) > limit
    found = found[:limit]
    return Page(found, found[-1].id if more and found else None)


def entry(session: Session, entry_id: int) -> AuditEntry | None:
    return session.get(AuditEntry, entry_id)
