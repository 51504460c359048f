"""Bulk run: a bulk command (cancel or retry every action of a filter) as durable engine
work, one row per command beside its audit entry, holding where it has got to.

The row is the cursor (``last_id``): each batch advances it in the transaction that changes
the batch's actions, so a run resumed after a crash, or delivered twice, never acts on a
batch twice and never skips one. The audit entry keeps the progress the studio shows.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, ForeignKey, Index, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from .db import Base, Id, Timestamps


class BulkRun(Timestamps, Base):
    __tablename__ = "stepwise_bulk_runs"
    __table_args__ = (
        # One run per bulk command's audit entry (the studio finds the run by its entry).
        Index("uq_stepwise_bulk_runs_audit_entry_id", "audit_entry_id", unique=True),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    audit_entry_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("stepwise_audit_entries.id"))
    #: cancel or retry.
    command: Mapped[str] = mapped_column(String(20))
    #: The filter it acts on, as ``BulkFilter.describe()`` wrote it.
    filter: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    by: Mapped[str | None] = mapped_column(String(255))
    reason: Mapped[str | None] = mapped_column(Text)
    #: The highest action id handled so far: the next batch starts above it.
    last_id: Mapped[int] = mapped_column(BigInteger, default=0)
    finished_at: Mapped[datetime | None]
    #: Why it stopped, when an error stopped it.
    error: Mapped[str | None] = mapped_column(Text)

    def __repr__(self) -> str:
        return f"<BulkRun {self.id} {self.command} entry={self.audit_entry_id} last_id={self.last_id}>"
