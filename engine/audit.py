"""Audit: every operator command and outside completion, with who, when, what and why.

One entry per command (a bulk command is one entry with its progress); the transitions it
causes land in each action's own history with the same ``by``. A target longer than its
column is cut with an ellipsis for the list and kept whole in the entry's data, so a command
on a long name (``stepwise forget KEY`` takes any key) is never refused for its audit.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Index, String, Text
from sqlalchemy.orm import Mapped, Session, mapped_column

from . import clock
from .db import Base, Id

#: The width of the target column (characters, as PostgreSQL's varchar counts them).
TARGET_LENGTH = 500
#: What ends a target cut to the column; the whole of it is in ``data["target"]``.
ELLIPSIS = "…"


class AuditEntry(Base):
    __tablename__ = "stepwise_audit_entries"
    __table_args__ = (
        Index("ix_stepwise_audit_entries_at", "at"),
        # The studio's audit page: newest first, filtered by command or by user.
        Index("ix_stepwise_audit_entries_command", "command", "id"),
        Index("ix_stepwise_audit_entries_by", "by", "id"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    at: Mapped[datetime] = mapped_column(default=clock.now)
    #: cancel, retry, skip, approve, reject, complete, forget, bulk_cancel, bulk_retry,
    #: schedule_create, schedule_pause, schedule_resume, schedule_trigger, schedule_delete …
    command: Mapped[str] = mapped_column(String(40))
    #: operator, webhook or caller.
    cause: Mapped[str] = mapped_column(String(20))
    by: Mapped[str | None] = mapped_column(String(255))
    reason: Mapped[str | None] = mapped_column(Text)
    #: What it acted on: "action:42", "achievement:Car/1/visit", "schedule:nightly", or "filter" for bulk;
    #: cut to TARGET_LENGTH with an ELLIPSIS when longer (see ``full_target``).
    target: Mapped[str] = mapped_column(String(TARGET_LENGTH))
    data: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    #: The outcome: completed, already_completed, not_found, not_retryable, done …
    result: Mapped[str | None] = mapped_column(String(40))
    total: Mapped[int | None]
    done: Mapped[int | None]
    finished_at: Mapped[datetime | None]

    @property
    def full_target(self) -> str:
        """What it acted on, whole: the target, or the data's copy of a target cut to the column."""
        whole = (self.data or {}).get("target")
        return whole if isinstance(whole, str) and self.target.endswith(ELLIPSIS) else self.target

    def __repr__(self) -> str:
        return f"<AuditEntry {self.id} {self.command} {self.target} by={self.by} {self.result}>"


def record(
    session: Session,
    command: str,
    target: str,
    *,
    cause: str,
    by: str | None,
    reason: str | None = None,
    result: str | None = None,
    **data: Any,
) -> AuditEntry:
    if len(target) > TARGET_LENGTH:
        data = {**data, "target": target}
        target = target[: TARGET_LENGTH - len(ELLIPSIS)] + ELLIPSIS
    entry = AuditEntry(
        at=clock.now(),
        command=command,
        cause=cause,
        by=by,
        reason=reason,
        target=target,
        data=data,
        result=result,
        finished_at=clock.now() if result is not None else None,
    )
    session.add(entry)
    return entry
