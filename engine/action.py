"""Actions: persisted invocations of a named action on an actor, the nodes of a tree.

``write_status`` is the one writer of an action's status: a guarded UPDATE that matches
only the statuses the diagram allows, so an action completes at most once (invariant 2).
"""

from __future__ import annotations

import functools
import traceback
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Executable,
    Index,
    String,
    Text,
    Update,
    bindparam,
    event,
    select,
    text,
    update,
)
from sqlalchemy.orm import Mapped, Session, mapped_column, object_session, relationship

from . import arguments, clock, registry, rows, status
from .db import Base, Id, Timestamps, partial_index
from .definition import Definition, find_or_add
from .errors import InvalidTransition

if TYPE_CHECKING:
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
        Index("ix_stepwise_actions_created_at", "created_at"),
        # Metrics: actions by status and name as an index-only scan, and the recent window
        # of starts (queue latency) and of completions (durations). Those two hold only the
        # actions that started or completed: a new action's row and its start's new version
        # are not written to an index that every query of it reads past (migration 0015).
        Index("ix_stepwise_actions_status_name", "status", "name"),
        partial_index(
            "ix_stepwise_actions_started_at",
            "started_at",
            where="started_at IS NOT NULL",
        ),
        partial_index(
            "ix_stepwise_actions_completed_at",
            "completed_at",
            where="completed_at IS NOT NULL",
        ),
        # A lane's live members, oldest first (admission, advancing, the studio's queues):
        # only incomplete actions, so a lane that never drains is not slowed by the
        # completed and superseded work of its key.
        partial_index(
            "ix_stepwise_actions_lane",
            "concurrency_key",
            "id",
            where="status IN ('pending', 'performing')",
        ),
        # The studio's failures by error class (newest first): only the rows that raised.
        partial_index(
            "ix_stepwise_actions_error_class",
            "error_class",
            "id",
            where="error_class IS NOT NULL",
        ),
        # Invariant 1: at most one performing action per lane, whatever the workers do.
        partial_index(
            "uq_stepwise_actions_one_performing_per_lane",
            "concurrency_key",
            unique=True,
            where="status = 'performing'",
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
    deadline_at: Mapped[datetime | None]
    superseded_by_id: Mapped[int | None] = mapped_column(BigInteger)
    after_callbacks_succeeded_count: Mapped[int | None]
    after_callbacks_failed_count: Mapped[int | None]
    #: What the action returned (its last step, a ``finish`` decision), or the payload it
    #: was completed with from outside (webhook, operator); JSON in the form of
    #: ``engine.arguments`` (``engine.result_of`` reads it back).
    result: Mapped[Any] = mapped_column(JSON, nullable=True)
    error_class: Mapped[str | None] = mapped_column(String(255))
    error_message: Mapped[str | None] = mapped_column(Text)
    error_traceback: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[datetime | None]
    completed_at: Mapped[datetime | None]

    #: Seconds, with their fraction (half a second is a timeout, not none). Declared after
    #: the timestamps, where migration 0002 put it when it replaced the integer column.
    timeout_seconds: Mapped[float | None] = mapped_column(sort_order=1)
    #: How often the sweeper sent its timeout again since it last made progress; after
    #: ``sweeper.MAX_RESENDS`` re-sends it gives up and fails the work.
    resend_count: Mapped[int] = mapped_column(default=0, server_default=text("0"), sort_order=1)
    #: The sweeper leaves it alone until then, twice as long after each re-send (NULL:
    #: until it is ``GRACE`` old past its deadline).
    next_sweep_at: Mapped[datetime | None] = mapped_column(sort_order=1)
    #: How many compensations its steps registered (engine/compensation.py), added to at
    #: registration: an action with none never reads the compensations table.
    compensations_count: Mapped[int] = mapped_column(default=0, server_default=text("0"), sort_order=2)

    steps: Mapped[list[Step]] = relationship(back_populates="action", order_by="Step.id", viewonly=True)
    parent_steps: Mapped[list[Step]] = relationship(
        secondary="stepwise_step_actions",
        primaryjoin="Action.id == stepwise_step_actions.c.child_action_id",
        secondaryjoin="Step.id == stepwise_step_actions.c.parent_step_id",
        order_by="Step.id",
        viewonly=True,
    )

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
        return find_or_add(cls, self.name)

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

    def read_afresh(self, actor: Any = None) -> Any:
        """Forget the actor and arguments loaded so far and load the actor row again, as
        the database holds it now (a session's rows do not expire on commit, so an earlier
        transaction's copy may be stale), unless ``actor`` is that row, read afresh in this
        transaction already (engine/lease.py). Returns the actor. Step bodies start here."""
        session = object_session(self)
        if session is None:
            raise InvalidTransition(f"action {self.id} is not attached to a session")
        self.__dict__.pop("_arguments", None)
        if actor is None:
            actor = registry.load_actor(session, self.actor_type, self.actor_id, fresh=True)
        self.__dict__["_actor"] = actor
        return actor

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
        self.error_class = error_class(error)
        self.error_message = str(error)
        self.error_traceback = "".join(traceback.format_exception(error))


@event.listens_for(Action, "expire")
def _forget_loaded(action: Action | None, attributes: Any) -> None:
    """The row expired (a rollback, ``expire``, ``refresh``): what was loaded from it goes
    too, so a retried attempt never sees, or persists, what a rolled-back one changed."""
    if action is None:
        return  # garbage-collected already, and its caches with it
    if attributes is None or "arguments_json" in attributes:
        action.__dict__.pop("_arguments", None)
    if attributes is None:
        action.__dict__.pop("_actor", None)


def write_status(
    session: Session,
    action: Action,
    to: str,
    only_from: frozenset[str] | None = None,
    joined: Callable[[Update], Executable] | None = None,
    joined_parameters: dict[str, Any] | None = None,
    joined_rows: list[Any] | None = None,
    **values: Any,
) -> bool:
    """Move ``action`` to ``to`` if the diagram allows it from its current stored status
    (and that status is in ``only_from``, when given).

    One guarded UPDATE: it matches nothing when another transaction completed the action
    first, and then this returns False and changes nothing. ``joined`` wraps that UPDATE
    in one statement that also does more (a PostgreSQL data-modifying CTE) and returns
    one row per action updated; ``joined_parameters`` are its own parameters, and its rows
    are added to ``joined_rows`` when given."""
    sources = status.sources_of(to) if only_from is None else status.sources_of(to) & only_from
    if not sources:
        raise InvalidTransition(f"no status may move to {to!r}")
    now = clock.now()
    statement = _status_update(to, tuple(sorted(values)), frozenset(sources))
    parameters = {f"v_{key}": value for key, value in values.items()}
    # (Named after no column: a CTE joined to it may write a table that has an action_id.)
    parameters.update(w_action_id=action.id, now=now)
    if joined is not None:
        parameters.update(joined_parameters or {})
        found = session.connection().execute(joined(statement), parameters).all()
        matched = len(found)
        if joined_rows is not None:
            joined_rows.extend(found)
    else:
        matched = session.connection().execute(statement, parameters).rowcount
    if matched != 1:
        return False
    rows.set_committed(action, {"status": to, "updated_at": now, **values})
    return True


@functools.cache
def _status_update(to: str, keys: tuple[str, ...], sources: frozenset[str]) -> Update:
    """The guarded UPDATE of ``write_status``, built once per target status and columns."""
    table = Action.__table__.c
    return (
        update(Action.__table__)  # type: ignore[arg-type]
        .where(table.id == bindparam("w_action_id"), table.status.in_(sorted(sources)))
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


def error_class(error: BaseException) -> str:
    return f"{type(error).__module__}.{type(error).__qualname__}"


def error_data(error: BaseException) -> dict[str, Any]:
    return {
        "error_class": error_class(error),
        "error_message": str(error),
        "traceback": "".join(traceback.format_exception(error)),
    }
