"""Actions: persisted invocations of a named action on an actor, the nodes of a tree.

``write_status`` is the one writer of an action's status: a guarded UPDATE that matches
only the statuses the diagram allows, so an action completes at most once (invariant 2).
"""

from __future__ import annotations

import functools
import traceback
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    JSON,
    BigInteger,
    ForeignKey,
    Index,
    String,
    Text,
    Update,
    bindparam,
    select,
    text,
    update,
)
from sqlalchemy.orm import Mapped, Session, mapped_column, object_session, relationship

from . import achievement, arguments, clock, history, registry, status
from .db import Base, Id, Timestamps
from .errors import InvalidTransition

if TYPE_CHECKING:
    from .definition import Definition
    from .performance import Performance
    from .step import Step


class Action(Timestamps, Base):
    __tablename__ = "stepwise_actions"
    __table_args__ = (
        Index("ix_stepwise_actions_actor", "actor_type", "actor_id", "name"),
        Index("ix_stepwise_actions_status", "status", "id"),
        Index("ix_stepwise_actions_name", "name", "id"),
        Index("ix_stepwise_actions_tree", "root_id"),
        Index("ix_stepwise_actions_roots", "root", "id"),
        Index("ix_stepwise_actions_concurrency_key", "concurrency_key", "id"),
        Index("ix_stepwise_actions_checksum_key", "checksum_key"),
        Index("ix_stepwise_actions_created_at", "created_at"),
        # Metrics: actions by status and name as an index-only scan, and the recent window
        # of starts (queue latency) and of completions (durations).
        Index("ix_stepwise_actions_status_name", "status", "name"),
        Index("ix_stepwise_actions_started_at", "started_at"),
        Index("ix_stepwise_actions_completed_at", "completed_at"),
        Index("ix_stepwise_actions_performance", "performance_id", "id"),
        # Invariant 1: at most one performing action per lane, whatever the workers do.
        Index(
            "uq_stepwise_actions_one_performing_per_lane",
            "concurrency_key",
            unique=True,
            sqlite_where=text("status = 'performing'"),
            postgresql_where=text("status = 'performing'"),
        ),
        # Ids are never reused (history and links keep pointing at the right rows).
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    actor_type: Mapped[str] = mapped_column(String(255))
    actor_id: Mapped[str] = mapped_column(String(255))
    name: Mapped[str] = mapped_column(String(255))
    arguments_json: Mapped[list[Any]] = mapped_column("arguments", JSON, default=list)
    status: Mapped[str] = mapped_column(String(20), default=status.PENDING)
    #: Invoked without a parent step. ``root_id`` is the root of the tree that created it
    #: (NULL for a root itself; see ``tree_id``).
    root: Mapped[bool] = mapped_column(default=False)
    root_id: Mapped[int | None] = mapped_column(BigInteger)
    outbound: Mapped[bool] = mapped_column(default=False)
    job: Mapped[str | None] = mapped_column(String(255))
    concurrency_key: Mapped[str] = mapped_column(String(255))
    checksum_key: Mapped[str] = mapped_column(String(255))
    checksum: Mapped[str | None] = mapped_column(String(64))
    current_step_index: Mapped[int] = mapped_column(default=0)
    timeout_seconds: Mapped[int | None]
    deadline_at: Mapped[datetime | None]
    performance_id: Mapped[int | None] = mapped_column(
        ForeignKey("stepwise_performances.id", ondelete="SET NULL")
    )
    superseded_by_id: Mapped[int | None] = mapped_column(BigInteger)
    after_callbacks_succeeded_count: Mapped[int | None]
    after_callbacks_failed_count: Mapped[int | None]
    #: The payload given when the action was completed from outside (webhook, operator).
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    error_class: Mapped[str | None] = mapped_column(String(255))
    error_message: Mapped[str | None] = mapped_column(Text)
    error_traceback: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[datetime | None]
    completed_at: Mapped[datetime | None]

    steps: Mapped[list[Step]] = relationship(back_populates="action", order_by="Step.id", viewonly=True)
    parent_steps: Mapped[list[Step]] = relationship(
        secondary="stepwise_step_actions",
        primaryjoin="Action.id == stepwise_step_actions.c.child_action_id",
        secondaryjoin="Step.id == stepwise_step_actions.c.parent_step_id",
        order_by="Step.id",
        viewonly=True,
    )
    performance: Mapped[Performance | None] = relationship(foreign_keys=[performance_id], viewonly=True)

    def __repr__(self) -> str:
        return f"<Action {self.id} {self.actor_type}/{self.actor_id}.{self.name} {self.status}>"

    # --- reading ----------------------------------------------------------------------

    @property
    def tree_id(self) -> int:
        return self.root_id if self.root_id is not None else self.id

    @property
    def tenancy_key(self) -> str:
        return f"{self.actor_type}/{self.actor_id}/{self.name}"

    @property
    def actor(self) -> Any:
        cached = self.__dict__.get("_actor")
        if cached is None:
            session = object_session(self)
            if session is None:
                raise InvalidTransition(f"action {self.id} is not attached to a session")
            cached = registry.load_actor(session, self.actor_type, self.actor_id)
            self.__dict__["_actor"] = cached
        return cached

    @property
    def definition(self) -> Definition:
        cached = self.__dict__.get("_actor")
        cls = type(cached) if cached is not None else registry.actor_class(self.actor_type)
        return registry.find_or_add(cls, self.name)

    @property
    def arguments(self) -> list[Any]:
        """The arguments as Python values; changes to the list are persisted with the action."""
        cached = self.__dict__.get("_arguments")
        if cached is None:
            session = object_session(self)
            if session is None:
                raise InvalidTransition(f"action {self.id} is not attached to a session")
            cached = list(arguments.load(session, self.arguments_json or []))
            self.__dict__["_arguments"] = cached
        return cached

    @arguments.setter
    def arguments(self, values: list[Any]) -> None:
        self.__dict__["_arguments"] = list(values)
        self.arguments_json = arguments.dump(list(values))

    def store_arguments(self) -> None:
        """Persist in-place changes that step code made to ``arguments``."""
        cached = self.__dict__.get("_arguments")
        if cached is not None:
            dumped = arguments.dump(cached)
            if dumped != self.arguments_json:
                self.arguments_json = dumped

    @property
    def completed(self) -> bool:
        return self.status in status.TERMINAL

    @property
    def cancellable(self) -> bool:
        return self.status in status.INCOMPLETE

    @property
    def succeeded_including_callbacks(self) -> bool:
        return self.status == status.SUCCEEDED and not self.after_callbacks_failed_count

    @property
    def short_checksum(self) -> str | None:
        return self.checksum[:8] if self.checksum else None

    @property
    def timeout(self) -> timedelta | None:
        return timedelta(seconds=self.timeout_seconds) if self.timeout_seconds else None

    # --- used by ``before`` hooks on an action not yet admitted --------------------------

    def cancel(self) -> None:
        """In a ``before`` hook: end this invocation as cancelled; nothing is persisted."""
        self._end_before_admission(status.CANCELLED)

    def complete(self) -> None:
        """In a ``before`` hook: end this invocation as succeeded; nothing is persisted."""
        self._end_before_admission(status.SUCCEEDED)

    def _end_before_admission(self, to: str) -> None:
        if self.id is not None:
            raise InvalidTransition(
                f"action {self.id} is already admitted: use engine.complete_action({self.id}, "
                f"{to!r}) to complete it"
            )
        self.status = to

    def record_error(self, error: BaseException) -> None:
        self.error_class = f"{type(error).__module__}.{type(error).__qualname__}"
        self.error_message = str(error)
        self.error_traceback = "".join(traceback.format_exception(error))


def write_status(session: Session, action: Action, to: str, **values: Any) -> bool:
    """Move ``action`` to ``to`` if the diagram allows it from its current stored status.

    One guarded UPDATE: it matches nothing when another transaction completed the action
    first, and then this returns False and changes nothing."""
    sources = status.sources_of(to)
    if not sources:
        raise InvalidTransition(f"no status may move to {to!r}")
    now = clock.now()
    statement = _status_update(to, tuple(sorted(values)))
    parameters = {f"v_{key}": value for key, value in values.items()}
    result = session.connection().execute(statement, {"action_id": action.id, "now": now, **parameters})
    if result.rowcount != 1:
        return False
    from sqlalchemy.orm.attributes import set_committed_value

    set_committed_value(action, "status", to)
    set_committed_value(action, "updated_at", now)
    for key, value in values.items():
        set_committed_value(action, key, value)
    return True


@functools.cache
def _status_update(to: str, keys: tuple[str, ...]) -> Update:
    """The guarded UPDATE of ``write_status``, built once per target status and columns."""
    table = Action.__table__.c
    return (
        update(Action.__table__)  # type: ignore[arg-type]
        .where(table.id == bindparam("action_id"), table.status.in_(status.sources_of(to)))
        .values(status=to, updated_at=bindparam("now"), **{key: bindparam(f"v_{key}") for key in keys})
    )


def lock(session: Session, action_id: int) -> Action | None:
    """Load an action fresh, holding its row lock on PostgreSQL."""
    return session.scalars(
        select(Action)
        .where(Action.id == action_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    ).one_or_none()


def ancestors_include(session: Session, start_ids: set[int], target_id: int) -> bool:
    """Whether ``target_id`` is among ``start_ids`` or their ancestors through parent steps,
    following every link, including those added by reuse and superseding."""
    from .step import Step, step_actions

    seen: set[int] = set()
    frontier = set(start_ids)
    while frontier:
        if target_id in frontier:
            return True
        seen |= frontier
        rows = session.scalars(
            select(Step.action_id)
            .join(step_actions, step_actions.c.parent_step_id == Step.id)
            .where(step_actions.c.child_action_id.in_(frontier))
            .distinct()
        ).all()
        frontier = set(rows) - seen
    return False


def descendant_of(action: Action, ancestor: Action) -> bool:
    session = object_session(action)
    assert session is not None
    return ancestors_include(session, {p.action_id for p in action.parent_steps}, ancestor.id)


def perform(session: Session, action: Action, cause: str = history.WORKER, **values: Any) -> None:
    """pending -> performing: start the clock, erase achievements under its key, and create
    its current step (run after commit). ``values`` are written with the status."""
    from . import broker, jobs
    from .step import open_step, resume_step

    reopened = action.started_at is not None
    now = clock.now()
    deadline = now + timedelta(seconds=action.timeout_seconds) if action.timeout_seconds else None
    if not write_status(session, action, status.PERFORMING, started_at=now, deadline_at=deadline, **values):
        raise InvalidTransition(f"action {action.id} is {action.status}, not pending")
    # The achievement records the last known good state of what the key stands for;
    # starting new work on the key makes that state unknown.
    achievement.erase(session, action.checksum_key)
    history.record(session, action, "started", cause=cause)
    if reopened:
        resume_step(session, action)  # an operator's retry: carry on where it stopped
    else:
        open_step(session, action)
    if action.timeout_seconds:
        broker.enqueue(session, jobs.timeout, action.id, delay=timedelta(seconds=action.timeout_seconds))


def accomplished(session: Session, action: Action, step: Step) -> None:
    """A step of ``action`` concluded: fail the action, start its next step, or complete it
    (an outbound action stays performing until something completes it)."""
    from . import performance
    from .step import open_step

    # Under the lane's lock, read the status afresh: a timeout or an outside completion
    # may have completed the action while its step body ran.
    lane = performance.lock(session, action.concurrency_key)
    session.refresh(action, ["status"])
    if action.status != status.PERFORMING:
        return
    if step.status == status.STEP_FAILED:
        performance.forward(session, lane, action, status.FAILED, unperformed_steps=False)
    elif len(action.definition.all_steps()) > action.current_step_index + 1:
        action.current_step_index += 1
        action.store_arguments()
        open_step(session, action)
    elif not action.outbound:
        performance.forward(session, lane, action, status.SUCCEEDED, unperformed_steps=False)
    else:
        history.record(session, action, "awaiting_completion")


def run_callbacks(session: Session, action: Action, completed_status: str) -> None:
    from .config import run_user_code

    definition = action.definition
    for callback in definition.callbacks_for(completed_status):
        error = run_user_code(callback, action.actor, action, *action.arguments)
        if error is None:
            action.after_callbacks_succeeded_count = (action.after_callbacks_succeeded_count or 0) + 1
        else:
            action.after_callbacks_failed_count = (action.after_callbacks_failed_count or 0) + 1
            action.record_error(error)
            history.record(session, action, "callback_failed", status=completed_status, **error_data(error))


def finalize(
    session: Session,
    action: Action,
    to: str,
    *,
    cause: str = history.WORKER,
    by: str | None = None,
    error: BaseException | None = None,
    note: str | None = None,
    unperformed_steps: bool = True,
) -> bool:
    """Complete ``action`` with status ``to`` once: run its after-callbacks, leave its lane,
    close the steps whose body never ran (``unperformed_steps=False``: it has none), grant
    its achievement, and conclude the parent steps waiting on it. False when the action was
    already completed (nothing changes then)."""
    from .step import conclude_waiters

    if to not in status.COMPLETIONS:
        raise InvalidTransition(f"actions complete as one of {sorted(status.COMPLETIONS)}, not {to!r}")
    values: dict[str, Any] = {"completed_at": clock.now(), "performance_id": None}
    if not write_status(session, action, to, **values):
        return False
    if error is not None:
        action.record_error(error)
    run_callbacks(session, action, to)
    action.store_arguments()
    data: dict[str, Any] = {"status": to}
    if note:
        data["note"] = note
    if error is not None:
        data.update(error_data(error))
    history.record(session, action, "completed", cause=cause, by=by, **data)
    if unperformed_steps:
        close_unperformed_steps(session, action)
    if action.succeeded_including_callbacks and action.checksum:
        achievement.grant(session, action.checksum_key, action.checksum, action.id)
    conclude_waiters(session, action)
    return True


def close_unperformed_steps(session: Session, action: Action) -> None:
    """A step whose body has not run when its action completes never will: close it, so no
    step is left open (steps already waiting on children close when those conclude)."""
    from .step import Step

    session.execute(
        update(Step)
        .where(Step.action_id == action.id, Step.performed_at.is_(None), Step.completed_at.is_(None))
        .values(status=status.STEP_CANCELLED, completed_at=clock.now(), updated_at=clock.now())
        .execution_options(synchronize_session=False)
    )


def error_data(error: BaseException) -> dict[str, Any]:
    return {
        "error_class": f"{type(error).__module__}.{type(error).__qualname__}",
        "error_message": str(error),
        "traceback": "".join(traceback.format_exception(error)),
    }
