"""Steps: one execution of one step of an action, waiting on the children and waits it
started.

A step's counter is changed only by one guarded UPDATE per conclusion, and every
conclusion comes from an invocation concluded exactly once, so counters never go negative
and never strand (invariant 3).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    CheckConstraint,
    Column,
    ForeignKey,
    Index,
    String,
    Table,
    UniqueConstraint,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Mapped, Session, mapped_column, relationship

from . import broker, clock, db, history, registry, status
from .db import Base, Id, Timestamps
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
        # Each step of an action runs at most once: a redelivered message cannot open it twice.
        UniqueConstraint("action_id", "definition_index"),
        CheckConstraint("pending_actions_count >= 0", name="pending_not_negative"),
        # The sweeper's question: which steps were opened but their body never ran?
        Index(
            "ix_stepwise_steps_unperformed",
            "created_at",
            sqlite_where=text("performed_at IS NULL"),
            postgresql_where=text("performed_at IS NULL"),
        ),
        {"sqlite_autoincrement": True},
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


class StepContext:
    """The ``step`` argument of a step body: start child actions and waits.

    Children are recorded only if the body returns normally; the next step starts when
    all of them have concluded."""

    def __init__(self, session: Session, step: Step, action: Action) -> None:
        self.session = session
        self.step = step
        self.action = action
        self._children: list[tuple[Any, str, tuple[Any, ...]]] = []
        self._waits: list[timedelta] = []
        self._failed = False

    def do(self, target: Any, *args: Any) -> None:
        """Start an action on this step's actor: ``step.do("honk")`` or ``step.do(self.drive, 5)``.
        A bound action or method of another actor runs on that actor."""
        actor = getattr(target, "__self__", None) or getattr(target, "actor", None)
        self.on(actor if actor is not None else self.action.actor, target, *args)

    def on(self, actors: Any, name: Any, *args: Any) -> None:
        """Start action ``name`` on one actor or a list of them; ``None`` entries are dropped."""
        action_name = name if isinstance(name, str) else getattr(name, "__name__", None)
        if not isinstance(action_name, str):
            raise TypeError(f"step.on takes an action name or a bound action, not {name!r}")
        for actor in _actors(actors):
            registry.find_or_add(type(actor), action_name)
            self._children.append((actor, action_name, args))

    def wait(self, duration: timedelta | float) -> None:
        """Hold this step open for ``duration`` (a timedelta or seconds)."""
        self._waits.append(duration if isinstance(duration, timedelta) else timedelta(seconds=duration))

    @property
    def status(self) -> str:
        return status.STEP_FAILED if self._failed else self.step.status

    @status.setter
    def status(self, value: str) -> None:
        """``step.status = "failed"`` fails the step on purpose, without raising."""
        if value != status.STEP_FAILED:
            raise ValueError("a step body may only set its status to 'failed'")
        self._failed = True

    @property
    def idempotency_key(self) -> str:
        """Stable per step execution, for external side effects: action, step and attempt."""
        return f"stepwise:{self.action.id}:{self.step.definition_index}:{self.step.attempt}"

    def _record(self) -> None:
        from .invocation import Invocation, invoke

        count = 0
        for actor, name, args in self._children:
            invoke(self.session, actor, name, args, parent_step=self.step)
            count += 1
        now = clock.now()
        for duration in self._waits:
            wait = Invocation(
                kind="wait",
                actor_type=self.action.actor_type,
                actor_id=self.action.actor_id,
                name="wait",
                arguments_json=[duration.total_seconds()],
                parent_step_id=self.step.id,
                due_at=now + duration,
            )
            self.session.add(wait)
            self.session.flush()
            from . import jobs

            broker.enqueue(self.session, jobs.wait_over, wait.id, delay=duration)
            count += 1
        self.step.pending_actions_count += count
        if self._failed:
            self.step.status = status.STEP_FAILED


def _actors(actors: Any) -> Iterable[Any]:
    if actors is None:
        return []
    if isinstance(actors, (list, tuple, set)):
        return [a for a in actors if a is not None]
    return [actors]


def open_step(session: Session, action: Action) -> Step:
    """Create the action's current step; its body runs after this transaction commits."""
    now = clock.now()
    step = Step(
        action_id=action.id,
        definition_index=action.current_step_index,
        status=status.STEP_PERFORMING,
        started_at=now,
        pending_actions_count=0,
        unsuccessful_actions_count=0,
    )
    session.add(step)
    session.flush()
    history.record(session, action, "step_started", step_id=step.id, index=step.definition_index)
    broker.after_commit(session, lambda: ready(session).append(step.id))
    return step


def resume_step(session: Session, action: Action) -> None:
    """A reopened action performs again: open its current step, or run it if its body
    has not run, or move on if it already succeeded; a step still waiting on children
    keeps waiting."""
    from .action import accomplished

    step = session.scalars(
        select(Step).where(Step.action_id == action.id, Step.definition_index == action.current_step_index)
    ).one_or_none()
    if step is None:
        open_step(session, action)
    elif step.status == status.STEP_CANCELLED:
        step.status, step.completed_at = status.STEP_PERFORMING, None
        history.record(session, action, "step_resumed", step_id=step.id)
        broker.after_commit(session, lambda: ready(session).append(step.id))
    elif step.status == status.STEP_PERFORMING and step.performed_at is None:
        broker.after_commit(session, lambda: ready(session).append(step.id))
    elif step.status != status.STEP_PERFORMING:
        accomplished(session, action, step)


def dispatch_ready(session: Session) -> None:
    """Send the bodies of the steps this session opened to the workers, instead of running
    them here (operator commands run in web requests and CLIs)."""
    from . import jobs

    queue = ready(session)
    while queue:
        broker.send(jobs.perform_step, queue.pop(0))


def ready(session: Session) -> list[int]:
    """Steps created by committed transactions of ``session`` whose bodies have not run."""
    return session.info.setdefault("stepwise.ready_steps", [])  # type: ignore[no-any-return]


def run_ready(session: Session) -> None:
    """Run the bodies of the steps this session opened, each in its own transaction,
    until none is left (a body may complete its action and open the next one's step)."""
    queue = ready(session)
    while queue:
        step_id = queue.pop(0)
        try:
            db.retrying(session, partial(perform, session, step_id))
        except Exception as error:
            # Unhandled: it propagates to the worker (which may retry the message), but the
            # action row keeps what happened (invariant 8).
            db.retrying(session, partial(record_unhandled, session, step_id, error))
            raise


def record_unhandled(session: Session, step_id: int, error: BaseException) -> None:
    from .action import Action, error_data

    step = session.get(Step, step_id)
    action = session.get(Action, step.action_id) if step is not None else None
    if action is not None:
        action.record_error(error)
        history.record(session, action, "step_errored", step_id=step_id, **error_data(error))


def perform(session: Session, step_id: int, failure: BaseException | None = None) -> None:
    """Run a step's body once; record its children and waits, or its failure."""
    from .action import Action
    from .config import run_user_code

    step = session.scalars(
        select(Step).where(Step.id == step_id).with_for_update().execution_options(populate_existing=True)
    ).one_or_none()
    if step is None or step.performed_at is not None or step.status != status.STEP_PERFORMING:
        return  # a redelivered message: the body already ran
    action = session.get(Action, step.action_id, populate_existing=True)
    assert action is not None
    if action.status != status.PERFORMING:
        return  # completed meanwhile (cancelled, timed out, completed from outside)
    if step.retry_at is not None and step.retry_at > clock.now():
        return  # early: the message for this attempt is delayed until retry_at
    error = failure
    context = StepContext(session, step, action)
    if error is None:
        body = action.definition.all_steps()[step.definition_index]
        error = run_user_code(body, action.actor, context, *list(action.arguments))
        if error is not None and (
            isinstance(error, SQLAlchemyError) or action.definition.retry.retries(error, step.attempt)
        ):
            # Record the failure in a fresh transaction: the attempt's own changes are
            # rolled back (a retried body runs again in full), and a database error has
            # left this transaction unusable anyway.
            session.rollback()
            return perform(session, step_id, failure=error)
    if error is not None and action.definition.retry.retries(error, step.attempt):
        return schedule_retry(session, step, action, error)
    step.performed_at = clock.now()
    step.retry_at = None
    if error is not None:
        step.pending_actions_count = 0
        step.status = status.STEP_FAILED
        action.record_error(error)
        from .action import error_data

        history.record(session, action, "step_failed", step_id=step.id, **error_data(error))
    else:
        context._record()
        action.store_arguments()
    if step.pending_actions_count == 0:
        complete(session, step, action)


def schedule_retry(session: Session, step: Step, action: Action, error: BaseException) -> None:
    """Record a failed attempt and send the next one, due after the policy's interval."""
    from . import jobs
    from .action import error_data

    interval = action.definition.retry.interval(step.attempt)
    step.retry_at = clock.now() + interval
    action.record_error(error)
    history.record(
        session,
        action,
        "attempt_failed",
        step_id=step.id,
        attempt=step.attempt,
        next_attempt_at=step.retry_at.isoformat(),
        **error_data(error),
    )
    step.attempt += 1
    broker.enqueue(session, jobs.perform_step, step.id, delay=interval)


def complete(session: Session, step: Step, action: Action | None = None) -> None:
    from .action import Action, accomplished

    step.completed_at = clock.now()
    if step.status != status.STEP_FAILED:
        step.status = status.STEP_FAILED if step.unsuccessful_actions_count else status.STEP_SUCCEEDED
    if action is None:
        action = session.get(Action, step.action_id, populate_existing=True)
        assert action is not None
    history.record(session, action, "step_concluded", step_id=step.id, status=step.status)
    session.flush()
    accomplished(session, action, step)


def conclude(session: Session, step_id: int, succeeded: bool, count: int = 1) -> None:
    """``count`` children (or waits) of the step concluded; complete it when none is left."""
    result = session.execute(
        update(Step)
        .where(Step.id == step_id, Step.pending_actions_count >= count)
        .values(
            pending_actions_count=Step.pending_actions_count - count,
            unsuccessful_actions_count=Step.unsuccessful_actions_count + (0 if succeeded else count),
            updated_at=clock.now(),
        )
        .returning(Step.pending_actions_count)
        .execution_options(synchronize_session=False)
    ).first()
    if result is None:
        raise NoPendingActions(f"step {step_id} waits on fewer than {count} children")
    step = session.get(Step, step_id, populate_existing=True)
    assert step is not None
    if result[0] == 0 and step.completed_at is None:
        complete(session, step)


def conclude_waiters(session: Session, action: Action) -> None:
    """Tell every step waiting on ``action`` that it concluded, each exactly once."""
    from .invocation import Invocation

    succeeded = action.succeeded_including_callbacks
    rows = session.execute(
        update(Invocation)
        .where(
            Invocation.action_id == action.id,
            Invocation.concluded_at.is_(None),
            Invocation.parent_step_id.is_not(None),
        )
        .values(concluded_at=clock.now(), succeeded=succeeded)
        .returning(Invocation.parent_step_id)
        .execution_options(synchronize_session=False)
    ).all()
    for step_id, count in sorted(Counter(row[0] for row in rows if row[0] is not None).items()):
        conclude(session, step_id, succeeded, count)


def link(session: Session, step_id: int, action_id: int) -> None:
    """Record the edge step -> child action (once)."""
    insert = pg_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
    session.execute(
        insert(step_actions)
        .values(parent_step_id=step_id, child_action_id=action_id)
        .on_conflict_do_nothing(index_elements=["parent_step_id", "child_action_id"])
    )


def resume(session: Session, action_id: int) -> None:
    """Queue the current step of a performing action if its body has not run yet."""
    from .action import Action

    pending = session.scalars(
        select(Step.id)
        .join(Action, Action.id == Step.action_id)
        .where(
            Step.action_id == action_id,
            Step.definition_index == Action.current_step_index,
            Step.performed_at.is_(None),
            Step.status == status.STEP_PERFORMING,
            Action.status == status.PERFORMING,
        )
    ).first()
    if pending is not None:
        ready(session).append(pending)
