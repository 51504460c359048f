"""Signals: named, durable messages to one action, kept in its inbox until a step that
waits for them consumes them, each exactly once.

A signal is a row from the moment it is sent, whether or not anyone waits yet; consuming
it is one guarded write (``consumed_at`` goes from NULL to a time, naming the wait that
took it), so two waits can never take the same signal. The transitions that send and
match signals live in ``engine/inbox.py``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, ForeignKey, Index, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from . import clock
from .db import Base, Id, partial_index

#: The longest signal name.
NAME_LENGTH = 100
#: The name of a wait invocation (kind "wait") that waits for signals; its arguments list
#: the names it waits for.
SIGNAL_WAIT = "signal"


class Signal(Base):
    __tablename__ = "stepwise_signals"
    __table_args__ = (
        # An action's inbox, oldest first: what a new wait may consume at once (FIFO).
        partial_index(
            "ix_stepwise_signals_inbox",
            "action_id",
            "id",
            where="consumed_at IS NULL",
        ),
        Index("ix_stepwise_signals_action", "action_id", "id"),
        # A delivery sent twice (a webhook's retry) is one signal: the second send finds
        # the first by its key instead of adding another.
        UniqueConstraint("action_id", "delivery_key"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    action_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("stepwise_actions.id"))
    name: Mapped[str] = mapped_column(String(NAME_LENGTH))
    #: JSON in the form of ``engine.arguments`` (actors, datetimes and decimals keep their type).
    payload: Mapped[Any] = mapped_column(JSON, nullable=True)
    #: Who sent it (a user, a system) and why, as the sender said.
    sent_by: Mapped[str | None] = mapped_column(String(255))
    note: Mapped[str | None] = mapped_column(Text)
    #: The sender's idempotency key (a webhook delivery id), unique per action.
    delivery_key: Mapped[str | None] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(default=clock.now)
    consumed_at: Mapped[datetime | None]
    #: The wait (an invocation of kind "wait") that consumed it.
    consumed_by_id: Mapped[int | None] = mapped_column(BigInteger)

    def __repr__(self) -> str:
        state = f"consumed by wait {self.consumed_by_id}" if self.consumed_at else "pending"
        return f"<Signal {self.id} {self.name!r} to action {self.action_id} {state}>"
