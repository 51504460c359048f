"""Achievements: the checksum of the last success under a ``checksum_key``.

An invocation whose checksum matches is skipped. The grant is an upsert, so two lanes
sharing a checksum_key never make a completion fail (invariant 6).
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any

from sqlalchemy import BigInteger, Executable, String, Update, bindparam, delete, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Mapped, Session, mapped_column

from . import clock
from .db import Base, Id, Timestamps


class Achievement(Timestamps, Base):
    __tablename__ = "stepwise_achievements"
    __table_args__ = {"sqlite_autoincrement": True}

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    # Unique: at most one achievement per key; the grant upserts on it.
    checksum_key: Mapped[str] = mapped_column(String(255), unique=True)
    checksum: Mapped[str] = mapped_column(String(64))
    #: The action whose success granted it (no foreign key: actions may be pruned).
    action_id: Mapped[int | None] = mapped_column(BigInteger)

    def __repr__(self) -> str:
        return f"<Achievement {self.checksum_key} {self.checksum[:8]}>"


_ERASE = delete(Achievement).where(Achievement.checksum_key == bindparam("key"))


def checksum(value: Any) -> str | None:
    """SHA-256 of the compact JSON of ``value`` (Stepped's ``Stepped.checksum``); None for None."""
    if value is None:
        return None
    dumped = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(dumped.encode("utf-8")).hexdigest()


def exists(session: Session, checksum_key: str, value: str | None) -> bool:
    if value is None:
        return False
    found = session.scalar(
        select(Achievement.id).where(Achievement.checksum_key == checksum_key, Achievement.checksum == value)
    )
    return found is not None


@functools.cache  # one per guarded UPDATE, itself built once (action._status_update)
def erasing(guarded: Update) -> Executable:
    """PostgreSQL: ``guarded`` (the UPDATE that starts one action) and, when it matched,
    the erasure of the achievement under the ``erase_key`` parameter, in one statement
    (data-modifying CTEs). One row per action updated."""
    started = guarded.returning(guarded.table.c.id).cte("started")
    erased = (
        delete(Achievement.__table__)  # type: ignore[arg-type]
        .where(Achievement.checksum_key == bindparam("erase_key"), select(started.c.id).exists())
        .cte("erased")
    )
    return select(started.c.id).add_cte(erased)


def erase(session: Session, checksum_key: str) -> None:
    """Starting work on a key makes its last known good state unknown."""
    session.connection().execute(_ERASE, {"key": checksum_key})


def grant(session: Session, checksum_key: str, value: str, action_id: int | None) -> None:
    dialect = session.get_bind().dialect.name
    insert = pg_insert if dialect == "postgresql" else sqlite_insert
    now = clock.now()
    statement = insert(Achievement).values(
        checksum_key=checksum_key,
        checksum=value,
        action_id=action_id,
        created_at=now,
        updated_at=now,
    )
    statement = statement.on_conflict_do_update(
        index_elements=[Achievement.checksum_key],
        set_={"checksum": value, "action_id": action_id, "updated_at": now},
    )
    session.execute(statement)


def forget(session: Session, checksum_key: str) -> bool:
    """Remove the achievement under ``checksum_key`` so the next invocation runs."""
    result = session.execute(delete(Achievement).where(Achievement.checksum_key == checksum_key))
    return bool(getattr(result, "rowcount", 0))


__all__ = ["Achievement", "checksum", "erase", "exists", "forget", "grant"]
