"""Invocations: the durable record of a request to run an action (and of a step's waits,
and of ``complete_later``'s requests to complete one).

``invoke`` inserts one in the caller's transaction and rings the broker after commit;
admission (engine/admission.py) consumes it exactly once. An invocation that is skipped, cancelled by its
``before`` hook or deadlocked never becomes an action; its outcome stays here and in the
parent's history. Each one concludes its parent step exactly once (invariant 3).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import JSON, ForeignKey, Index, String, text
from sqlalchemy.orm import Mapped, Session, mapped_column

from . import arguments, broker, clock, registry, rows
from .db import Base, Id, partial_index
from .definition import find_or_add

if TYPE_CHECKING:
    from .step import Step


class Invocation(Base):
    __tablename__ = "stepwise_invocations"
    __table_args__ = (
        # The sweeper's question: what was requested but never settled?
        partial_index(
            "ix_stepwise_invocations_unsettled",
            "created_at",
            where="settled_at IS NULL",
        ),
        # A completing action finds the steps still waiting on it.
        partial_index(
            "ix_stepwise_invocations_waiting",
            "action_id",
            where="concluded_at IS NULL",
        ),
        # The sweeper's waits: those not concluded, by due time (a long wait not yet due
        # costs it nothing).
        partial_index(
            "ix_stepwise_invocations_due_waits",
            "due_at",
            where="kind = 'wait' AND concluded_at IS NULL",
        ),
        # Metrics: the invocation an action was admitted from (queue latency), concluded or not.
        Index("ix_stepwise_invocations_action", "action_id"),
        Index("ix_stepwise_invocations_parent_step", "parent_step_id"),
        # The studio: the recent invocations an achievement skipped, newest first.
        partial_index(
            "ix_stepwise_invocations_skipped",
            "checksum_key",
            "id",
            where="checksum_key IS NOT NULL",
        ),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    #: "action", "wait" for ``step.wait``, or "complete" for ``complete_later`` (its
    #: ``arguments`` hold the status, ``action_id`` the action it completes, if known).
    kind: Mapped[str] = mapped_column(String(10), default="action")
    actor_type: Mapped[str] = mapped_column(String(255))
    actor_id: Mapped[str] = mapped_column(String(255))
    name: Mapped[str] = mapped_column(String(255))
    arguments_json: Mapped[list[Any]] = mapped_column("arguments", JSON, default=list)
    parent_step_id: Mapped[int | None] = mapped_column(ForeignKey("stepwise_steps.id"))
    #: The action this invocation waits on: admitted, attached to, or taken over by.
    action_id: Mapped[int | None] = mapped_column(ForeignKey("stepwise_actions.id"))
    #: admitted, attached, skipped, cancelled, succeeded, failed or deadlocked (a wait:
    #: waited; a completion request: completed, already_completed or not_found).
    outcome: Mapped[str | None] = mapped_column(String(20))
    error_class: Mapped[str | None] = mapped_column(String(255))
    error_message: Mapped[str | None] = mapped_column(String(2000))
    created_at: Mapped[datetime] = mapped_column(default=clock.now)
    due_at: Mapped[datetime | None]
    settled_at: Mapped[datetime | None]
    concluded_at: Mapped[datetime | None]
    #: Whether the waited-on work concluded successfully (set with concluded_at); an
    #: operator's retry reopens exactly the unsuccessful ones.
    succeeded: Mapped[bool | None]
    #: The achievement's key, when an achievement skipped this invocation (else NULL).
    checksum_key: Mapped[str | None] = mapped_column(String(255))
    #: How often the sweeper sent its admission (or its wait) again since it last made progress; after
    #: ``sweeper.MAX_RESENDS`` re-sends it gives up and fails the work.
    resend_count: Mapped[int] = mapped_column(default=0, server_default=text("0"))
    #: The sweeper leaves it alone until then, twice as long after each re-send (NULL:
    #: until it is ``GRACE`` old or, for a wait, past its due time).
    next_sweep_at: Mapped[datetime | None]

    def __repr__(self) -> str:
        return (
            f"<Invocation {self.id} {self.kind} {self.actor_type}/{self.actor_id}.{self.name} {self.outcome}>"
        )


def invoke(
    session: Session,
    actor: Any,
    name: str,
    args: Sequence[Any],
    *,
    parent_step: Step | None = None,
    enqueue: bool = True,
) -> Invocation:
    """Record an invocation of ``name`` on ``actor`` in ``session``'s transaction; its
    admission message goes out after commit."""
    invocation = request(actor, name, args, parent_step)
    session.add(invocation)
    session.flush()
    if enqueue:
        broker.enqueue(session, broker.ADMIT, invocation.id)
    return invocation


def request(actor: Any, name: str, args: Sequence[Any], parent_step: Step | None = None) -> Invocation:
    """A new invocation of ``name`` on ``actor``, not yet added to a session. An action
    that cannot run fails here, in the caller."""
    find_or_add(type(actor), name).check_runnable()
    actor_type, actor_id = registry.actor_ref(actor)
    return rows.transient(
        Invocation,
        {
            "kind": "action",
            "actor_type": actor_type,
            "actor_id": actor_id,
            "name": name,
            "arguments_json": arguments.dump(list(args)),
            "parent_step_id": parent_step.id if parent_step is not None else None,
            "created_at": clock.now(),
        },
    )
