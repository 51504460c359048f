"""Invocations: the durable record of a request to run an action (and of a step's waits).

``later()`` inserts one in the caller's transaction and rings the broker after commit;
admission consumes it exactly once. An invocation that is skipped, cancelled by its
``before`` hook or deadlocked never becomes an action; its outcome stays here and in the
parent's history. Each one concludes its parent step exactly once (invariant 3).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any

from sqlalchemy import JSON, ForeignKey, Index, String, bindparam, select, text
from sqlalchemy.orm import Mapped, Session, mapped_column, object_session

from . import arguments, broker, clock, db, history, registry, status
from .action import Action, error_data
from .config import run_user_code
from .db import Base, Id
from .errors import ActorNotFound, UnknownAction

if TYPE_CHECKING:
    from .step import Step


class Invocation(Base):
    __tablename__ = "stepwise_invocations"
    __table_args__ = (
        # The sweeper's question: what was requested but never settled?
        Index(
            "ix_stepwise_invocations_unsettled",
            "created_at",
            sqlite_where=text("settled_at IS NULL"),
            postgresql_where=text("settled_at IS NULL"),
        ),
        # A completing action finds the steps still waiting on it.
        Index(
            "ix_stepwise_invocations_waiting",
            "action_id",
            sqlite_where=text("concluded_at IS NULL"),
            postgresql_where=text("concluded_at IS NULL"),
        ),
        # Metrics: the invocation an action was admitted from (queue latency), concluded or not.
        Index("ix_stepwise_invocations_action", "action_id"),
        Index("ix_stepwise_invocations_parent_step", "parent_step_id"),
        # The studio: the recent invocations an achievement skipped, newest first.
        Index(
            "ix_stepwise_invocations_skipped",
            "checksum_key",
            "id",
            sqlite_where=text("checksum_key IS NOT NULL"),
            postgresql_where=text("checksum_key IS NOT NULL"),
        ),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    #: "action", or "wait" for ``step.wait``.
    kind: Mapped[str] = mapped_column(String(10), default="action")
    actor_type: Mapped[str] = mapped_column(String(255))
    actor_id: Mapped[str] = mapped_column(String(255))
    name: Mapped[str] = mapped_column(String(255))
    arguments_json: Mapped[list[Any]] = mapped_column("arguments", JSON, default=list)
    parent_step_id: Mapped[int | None] = mapped_column(ForeignKey("stepwise_steps.id"))
    #: The action this invocation waits on: admitted, attached to, or taken over by.
    action_id: Mapped[int | None] = mapped_column(ForeignKey("stepwise_actions.id"))
    #: admitted, attached, skipped, cancelled, succeeded, failed or deadlocked.
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
    from . import jobs

    invocation = request(actor, name, args, parent_step)
    session.add(invocation)
    session.flush()
    if enqueue:
        broker.enqueue(session, jobs.admit, invocation.id)
    return invocation


def request(actor: Any, name: str, args: Sequence[Any], parent_step: Step | None = None) -> Invocation:
    """A new invocation of ``name`` on ``actor``, not yet added to a session. An action
    that cannot run fails here, in the caller."""
    registry.find_or_add(type(actor), name).check_runnable()
    actor_type, actor_id = registry.actor_ref(actor)
    return Invocation(
        kind="action",
        actor_type=actor_type,
        actor_id=actor_id,
        name=name,
        arguments_json=arguments.dump(list(args)),
        parent_step_id=parent_step.id if parent_step is not None else None,
        created_at=clock.now(),
    )


def session_for(actor: Any) -> tuple[Session, bool]:
    """The actor's own session, or a new one (then the caller must close it)."""
    session = object_session(actor)
    if session is not None:
        return session, False
    return db.session(), True


def later(actor: Any, name: str, *args: Any) -> Invocation:
    """Request ``name`` on ``actor``: recorded in the actor's session (committed with it),
    performed by a worker after commit. A service actor's invocation commits at once."""
    session, own = session_for(actor)
    try:
        invocation = invoke(session, actor, name, args)
        if own:
            session.commit()
        return invocation
    finally:
        if own:
            session.close()


def now(actor: Any, name: str, *args: Any) -> Action:
    """Perform ``name`` on ``actor`` in this process, through the same state machine: admit
    it and run its first steps; children run on workers. Commits the actor's session.
    Returns the admitted action, the action it was attached to, or an unsaved action
    whose status says how it ended (skipped invocations are ``succeeded``)."""
    from .step_body import run_ready

    session, own = session_for(actor)
    try:
        invocation = invoke(session, actor, name, args, enqueue=False)
        session.commit()
        action = admit_recording_errors(session, invocation.id, actor)
        run_ready(session)
        assert action is not None
        return action
    finally:
        if own:
            session.close()


def admit_recording_errors(session: Session, invocation_id: int, actor: Any = None) -> Action | None:
    """``admit`` in its own transaction; an unhandled error in user code (``before``, key
    or checksum callables) propagates, and is stored on the invocation first (invariant 8)."""
    try:
        return db.retrying(session, lambda: admit(session, invocation_id, actor=actor))
    except Exception as error:
        db.retrying(session, partial(_record_unhandled, session, invocation_id, error))
        raise


def _record_unhandled(session: Session, invocation_id: int, error: BaseException) -> None:
    invocation = session.get(Invocation, invocation_id)
    if invocation is not None:
        invocation.error_class = f"{type(error).__module__}.{type(error).__qualname__}"
        invocation.error_message = str(error)[:2000]
        history.record(session, None, "invocation_errored", invocation_id=invocation_id, **error_data(error))


_LOCK = (
    select(Invocation)
    .where(Invocation.id == bindparam("invocation_id"))
    .with_for_update()
    .execution_options(populate_existing=True)
)


def admit(session: Session, invocation_id: int, actor: Any = None) -> Action | None:
    """Turn an invocation into an action in its lane, exactly once. None when it was
    already settled (a redelivered message)."""
    invocation = session.scalars(_LOCK, {"invocation_id": invocation_id}).one_or_none()
    if invocation is None or invocation.settled_at is not None:
        return None
    try:
        if actor is None:
            actor = registry.load_actor(session, invocation.actor_type, invocation.actor_id)
        definition = registry.find_or_add(type(actor), invocation.name)
        args = list(arguments.load(session, invocation.arguments_json))
    except (ActorNotFound, UnknownAction) as error:
        candidate = Action(
            actor_type=invocation.actor_type,
            actor_id=invocation.actor_id,
            name=invocation.name,
            status=status.FAILED,
        )
        candidate.record_error(error)
        return settle_unadmitted(session, invocation, candidate, "failed", error=error)
    parent_action = _parent_action(session, invocation)
    candidate = Action(
        actor_type=invocation.actor_type,
        actor_id=invocation.actor_id,
        name=invocation.name,
        arguments_json=invocation.arguments_json,
        status=status.PENDING,
        root=parent_action is None,
        root_id=parent_action.tree_id if parent_action is not None else None,
        outbound=definition.outbound,
        job=getattr(definition.job, "actor_name", None),
        current_step_index=0,
    )
    candidate.__dict__["_actor"] = actor
    candidate.__dict__["_arguments"] = args
    tenancy = candidate.tenancy_key
    # Keys are computed from the original arguments, before ``before`` may change them.
    candidate.concurrency_key = definition.key(definition.concurrency_key, actor, args, tenancy)
    candidate.checksum_key = definition.key(definition.checksum_key, actor, args, tenancy)
    candidate.timeout_seconds = definition.timeout_seconds(actor, args)
    if definition.before_hook is not None:
        failure = run_user_code(definition.before_hook, actor, candidate, *args)
        if failure is not None:
            candidate.status = status.FAILED
            candidate.record_error(failure)
            return settle_unadmitted(session, invocation, candidate, "failed", error=failure)
    if candidate.status != status.PENDING:
        return settle_unadmitted(session, invocation, candidate, candidate.status)
    candidate.store_arguments()
    candidate.checksum = definition.checksum_value(actor, candidate.arguments)
    from .performance import obtain_for

    result = obtain_for(session, candidate, invocation, parent_action)
    if result is candidate and candidate.id is not None:
        _settle(session, invocation, "admitted", candidate)
    return result


def _parent_action(session: Session, invocation: Invocation) -> Action | None:
    if invocation.parent_step_id is None:
        return None
    from .step import Step

    return session.scalars(
        select(Action).join(Step, Step.action_id == Action.id).where(Step.id == bindparam("step_id")),
        {"step_id": invocation.parent_step_id},
    ).one_or_none()


def _settle(session: Session, invocation: Invocation, outcome: str, action: Action | None) -> None:
    from .step import link

    invocation.settled_at = clock.now()
    invocation.outcome = outcome
    if action is not None and action.id is not None:
        invocation.action_id = action.id
        if invocation.parent_step_id is not None:
            link(session, invocation.parent_step_id, action.id)


def attach(session: Session, invocation: Invocation, existing: Action) -> Action:
    """The same work is already in the lane: wait on it instead of queueing a copy."""
    _settle(session, invocation, "attached", existing)
    history.record(session, existing, "attached", invocation_id=invocation.id)
    return existing


def settle_unadmitted(
    session: Session,
    invocation: Invocation,
    candidate: Action,
    outcome: str,
    error: BaseException | None = None,
) -> Action:
    """The invocation ends without becoming an action: record why, and conclude the
    parent step (successfully only when the candidate ended succeeded)."""
    from .step import conclude

    _settle(session, invocation, outcome, None)
    invocation.concluded_at = clock.now()
    invocation.succeeded = candidate.status == status.SUCCEEDED
    if error is not None:
        invocation.error_class = f"{type(error).__module__}.{type(error).__qualname__}"
        invocation.error_message = str(error)[:2000]
    parent = _parent_action(session, invocation)
    data: dict[str, Any] = {"name": candidate.name, "actor": f"{candidate.actor_type}/{candidate.actor_id}"}
    if error is not None:
        data.update(error_data(error))
    history.record(session, parent, f"invocation_{outcome}", invocation_id=invocation.id, **data)
    if invocation.parent_step_id is not None:
        conclude(session, invocation.parent_step_id, candidate.status == status.SUCCEEDED)
    return candidate
