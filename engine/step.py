"""Steps: one execution of one step of an action, waiting on the children and waits it
started.

A step's counter is changed only by one guarded UPDATE per conclusion, and every
conclusion comes from an invocation concluded exactly once, so counters never go negative
and never strand (invariant 3).
"""

from __future__ import annotations

import functools
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import (
    CTE,
    JSON,
    CheckConstraint,
    Column,
    ForeignKey,
    Index,
    Insert,
    String,
    Table,
    UniqueConstraint,
    bindparam,
    insert,
    inspect,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Mapped, Session, mapped_column, relationship

from . import broker, clock, db, history, rows, status
from .db import Base, Id, Timestamps, partial_index
from .errors import NoPendingActions

if TYPE_CHECKING:
    from .action import Action

#: Which actions each step has waited on (the tree's edges), including actions attached
#: by reuse and those that took over from a superseded one.
step_actions = Table(
    "stepwise_step_actions",
    Base.metadata,
    Column("parent_step_id", ForeignKey("stepwise_steps.id"), primary_key=True),
    Column("child_action_id", ForeignKey("stepwise_actions.id"), primary_key=True),
    Index("ix_stepwise_step_actions_child", "child_action_id", "parent_step_id"),
)


class Step(Timestamps, Base):
    __tablename__ = "stepwise_steps"
    __table_args__ = (
        # Each visit of a step runs at most once: a redelivered message cannot open it twice
        # (a decision that goes back to a step opens its next visit).
        UniqueConstraint("action_id", "definition_index", "visit"),
        CheckConstraint("pending_actions_count >= 0", name="pending_not_negative"),
        # The sweeper's question: which steps were opened but their body never ran?
        partial_index(
            "ix_stepwise_steps_unperformed",
            "created_at",
            where="performed_at IS NULL",
        ),
        # Room on each page for the claim's new row version (engine/claiming.py): it
        # changes no indexed column, so PostgreSQL can write it on the same page (HOT)
        # and touch none of the table's indexes (migration 0013 sets it on existing tables).
        {"sqlite_autoincrement": True, "postgresql_with": {"fillfactor": 80}},
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    action_id: Mapped[int] = mapped_column(ForeignKey("stepwise_actions.id"), index=True)
    definition_index: Mapped[int]
    status: Mapped[str] = mapped_column(String(20), default=status.STEP_PERFORMING)
    pending_actions_count: Mapped[int] = mapped_column(default=0)
    unsuccessful_actions_count: Mapped[int] = mapped_column(default=0)
    #: The try of the body now running or next to run (1 = the first); see RetryPolicy.
    attempt: Mapped[int] = mapped_column(default=1)
    #: When the next attempt is due, while a failed attempt waits to be retried.
    retry_at: Mapped[datetime | None]
    started_at: Mapped[datetime | None]
    #: When the step's body ran and its children were recorded (NULL: not yet run).
    performed_at: Mapped[datetime | None]
    completed_at: Mapped[datetime | None]
    # Declared after the timestamps, where migration 0002 added them.
    #: How often the sweeper sent its body (or its job) again since it last made progress; after
    #: ``sweeper.MAX_RESENDS`` re-sends it gives up and fails the work.
    resend_count: Mapped[int] = mapped_column(default=0, server_default=text("0"), sort_order=1)
    #: The sweeper leaves it alone until then, twice as long after each re-send (NULL:
    #: until it is ``GRACE`` old).
    next_sweep_at: Mapped[datetime | None] = mapped_column(sort_order=1)
    #: When the broker took the message of the action's job (job-backed actions, on the
    #: step that sent it); NULL while the send is not confirmed, and the sweeper sends the
    #: job again.
    job_sent_at: Mapped[datetime | None] = mapped_column(sort_order=1)
    # Declared after the timestamps, where migration 0004 added them.
    #: Which time the action runs this step (1 = the first; a decision that goes back to it
    #: opens the next visit), capped by the step's ``max_visits``.
    visit: Mapped[int] = mapped_column(default=1, server_default=text("1"), sort_order=2)
    #: What the body returned (JSON in the form of ``engine.arguments``): the action's result
    #: when this step is its last one.
    result: Mapped[Any] = mapped_column(JSON, nullable=True, sort_order=2)
    #: The body's decision, when it took one: ``{"go_to": name}``, ``{"finish": true}`` or
    #: ``{"fail": reason}`` (NULL: the next step).
    decision: Mapped[dict[str, Any] | None] = mapped_column(JSON, sort_order=2)
    # Declared after the timestamps, where migration 0013 added it.
    #: Until when a worker that claimed the step runs its body (engine/claiming.py): no
    #: other runs it, the sweeper does not send it again and a completion of its action
    #: leaves it to that body's outcome. NULL, or past: nobody holds it.
    leased_until: Mapped[datetime | None] = mapped_column(sort_order=3)

    action: Mapped[Action] = relationship(back_populates="steps", viewonly=True)
    actions: Mapped[list[Action]] = relationship(
        secondary=step_actions,
        primaryjoin=lambda: Step.id == step_actions.c.parent_step_id,
        secondaryjoin="Action.id == stepwise_step_actions.c.child_action_id",
        order_by="Action.id",
        viewonly=True,
    )

    def __repr__(self) -> str:
        return (
            f"<Step {self.id} action={self.action_id} #{self.definition_index} {self.status} "
            f"pending={self.pending_actions_count}>"
        )


_steps = Step.__table__.c
_COLUMN_KEYS = frozenset(column.key for column in Step.__table__.c)
#: ``count`` children of a step concluded (``failed`` of them unsuccessfully), never below zero.
_CONCLUDE = (
    update(Step.__table__)  # type: ignore[arg-type]
    .where(_steps.id == bindparam("step_id"), _steps.pending_actions_count >= bindparam("count"))
    .values(
        pending_actions_count=_steps.pending_actions_count - bindparam("count"),
        unsuccessful_actions_count=_steps.unsuccessful_actions_count + bindparam("failed"),
        updated_at=bindparam("now"),
    )
    .returning(*_steps)
)
#: The same, loading the step it updated (its whole row, fresh) into the session.
_CONCLUDED = select(Step).from_statement(_CONCLUDE).execution_options(populate_existing=True, autoflush=False)


def changes(step: Step) -> dict[str, Any]:
    """The step's column attributes changed in this session and not yet written, with
    ``updated_at`` (written with every change): what a flush would write."""
    state = inspect(step)
    changed = {
        attribute.key: attribute.history.added[0]
        for attribute in state.attrs
        if attribute.key in _COLUMN_KEYS and attribute.history.added
    }
    if changed:
        changed["updated_at"] = clock.now()
    return changed


def mark_written(step: Step, changed: dict[str, Any]) -> None:
    """``changed`` is written by a statement of its own: the session holds it as stored."""
    rows.set_committed(step, changed)


@functools.cache
def writing(columns: tuple[str, ...]) -> CTE:
    """A CTE writing these columns of the step ``s_id`` from the parameters ``s_<column>``
    (``changes``), for a statement that also does more (engine/completion.py)."""
    return (
        update(Step.__table__)  # type: ignore[arg-type]
        .where(_steps.id == bindparam("s_id"))
        .values({column: bindparam(f"s_{column}", type_=_steps[column].type) for column in columns})
        .cte("step_written")
    )


def open_step(session: Session, action: Action, visit: int = 1) -> int:
    """Create the action's current step (its ``visit``-th run): its id. Its body runs after
    this transaction commits. One INSERT … RETURNING, after the session's pending changes
    (it flushes them first, as the unit of work did): the row is not loaded into the session."""
    now = clock.now()
    session.flush()
    step_id: int = (
        session.connection()
        .execute(
            _OPEN,
            {
                "action_id": action.id,
                "definition_index": action.current_step_index,
                "visit": visit,
                "started_at": now,
                "created_at": now,
                "updated_at": now,
            },
        )
        .scalar_one()
    )
    data: dict[str, Any] = {"visit": visit} if visit > 1 else {}
    history.record(session, action, "step_started", step_id=step_id, index=action.current_step_index, **data)
    broker.ready_after_commit(session, step_id)
    return step_id


_OPEN = (
    insert(cast(Table, Step.__table__))
    .values(
        action_id=bindparam("action_id"),
        definition_index=bindparam("definition_index"),
        visit=bindparam("visit"),
        status=status.STEP_PERFORMING,
        pending_actions_count=0,
        unsuccessful_actions_count=0,
        started_at=bindparam("started_at"),
        created_at=bindparam("created_at"),
        updated_at=bindparam("updated_at"),
    )
    .returning(_steps.id)
)


def decrement(session: Session, step_id: int, count: int, failed: int) -> Step:
    """``count`` children of the step concluded (``failed`` of them unsuccessfully): the
    step as that UPDATE left it (its RETURNING, no second read), whose
    ``pending_actions_count`` says how many it still waits on. Raises ``NoPendingActions``
    rather than go below zero."""
    parameters = {"step_id": step_id, "count": count, "failed": failed, "now": clock.now()}
    step: Step | None = session.scalars(_CONCLUDED, parameters).one_or_none()
    if step is None:
        raise NoPendingActions(f"step {step_id} waits on fewer than {count} children")
    return step


def close_unperformed(session: Session, action_id: int) -> None:
    """A step whose body has not run when its action completes never will: close it, so no
    step is left open (steps already waiting on children close when those conclude).

    A step whose body is running holds its lease (its row lock, or a live claim) and is
    skipped, not waited for: this runs under the lane's lock, and the body's outcome, recorded later under the
    same lock, closes its step itself. Waiting here would hold the lane for the body's
    whole run, and deadlock when the body waits for this completion (a webhook)."""
    session.execute(_CLOSE_UNPERFORMED, {"b_action_id": action_id, "b_now": clock.now()})


def unclaimed(now: Any) -> Any:
    """The condition that no worker's claim on the step is live at ``now``
    (engine/claiming.py): nobody runs its body."""
    return or_(Step.leased_until.is_(None), Step.leased_until <= now)


_unperformed = (
    select(Step.id)
    .where(
        Step.action_id == bindparam("b_action_id"),
        Step.performed_at.is_(None),
        Step.completed_at.is_(None),
        unclaimed(bindparam("b_now")),
    )
    .with_for_update(skip_locked=True)
)
_CLOSE_UNPERFORMED = (
    update(Step)
    .where(Step.id.in_(_unperformed.scalar_subquery()))
    .values(status=status.STEP_CANCELLED, completed_at=bindparam("b_now"), updated_at=bindparam("b_now"))
    .execution_options(synchronize_session=False)
)


def job_sent(step_id: int) -> None:
    """Record, in a transaction of its own, that the broker took the job this step sent
    (called after the step's transaction committed, once the send succeeded)."""
    with db.transaction() as session:
        session.execute(
            update(Step)
            .where(Step.id == step_id, Step.job_sent_at.is_(None))
            .values(job_sent_at=clock.now())
            .execution_options(synchronize_session=False)
        )


def link(session: Session, step_id: int, action_id: int) -> None:
    """Record the edge step -> child action (once)."""
    connection = session.connection()
    connection.execute(_link(connection.dialect.name), {"step_id": step_id, "action_id": action_id})


@functools.cache
def _link(dialect: str) -> Insert:
    insert = pg_insert if dialect == "postgresql" else sqlite_insert
    return (
        insert(step_actions)
        .values(parent_step_id=bindparam("step_id"), child_action_id=bindparam("action_id"))
        .on_conflict_do_nothing(index_elements=["parent_step_id", "child_action_id"])
    )
