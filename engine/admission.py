"""Admission: an invocation becomes an action in its lane, exactly once.

``admit`` consumes an invocation under its row lock: it may be skipped by an achievement,
cancelled or completed by its ``before`` hook, deadlocked (its lane is held by its own
ancestor), attached to the same work already in the lane, or queued in the lane (then it
supersedes the older queued actions). An invocation that never becomes an action leaves
its outcome on the invocation and in its parent's history, and concludes its parent step.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from sqlalchemy import BigInteger, bindparam, select, update
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import Session, make_transient

from . import achievement, arguments, clock, db, founding, history, performance, registry, rows, status
from .action import Action, error_class, error_data, write_status
from .completion import conclude, perform
from .config import handles, run_user_code
from .definition import Definition, find_or_add
from .errors import ActorNotFound, Deadlock, UnknownAction
from .invocation import Invocation
from .performance import Performance
from .step import Step, link, step_actions


def admit_recording_errors(session: Session, invocation_id: int, actor: Any = None) -> Action | None:
    """``admit`` in its own transaction; an unhandled error in user code (``before``, key,
    checksum or timeout callables) propagates, and is stored on the invocation first
    (invariant 8)."""
    try:
        return db.retrying(session, lambda: admit(session, invocation_id, actor=actor))
    except Exception as error:
        db.retrying(session, partial(_record_unhandled, session, invocation_id, error))
        raise


def record_unhandled_error(invocation_id: int, error: BaseException) -> None:
    """Store an unhandled error of user code on its invocation, in a transaction of its own
    (the one that raised it was rolled back), before it propagates (invariant 8)."""
    with db.session() as session:
        db.retrying(session, partial(_record_unhandled, session, invocation_id, error))


def _record_unhandled(session: Session, invocation_id: int, error: BaseException) -> None:
    invocation = session.get(Invocation, invocation_id)
    if invocation is not None:
        invocation.error_class = error_class(error)
        invocation.error_message = str(error)[:2000]
        history.record(session, None, "invocation_errored", invocation_id=invocation_id, **error_data(error))


#: The invocation, holding its row lock, with its parent step's action (None for a root):
#: one read. The parent's columns used (its id and tree) never change.
_LOCKED = (
    select(Invocation, Action)
    .outerjoin(Step, Step.id == Invocation.parent_step_id)
    .outerjoin(Action, Action.id == Step.action_id)
    .with_for_update(of=Invocation)
    .execution_options(populate_existing=True)
)
_LOCK = _LOCKED.where(Invocation.id == bindparam("invocation_id"))
#: PostgreSQL: the same for many ids, locked in id order (engine/batch_admission.py).
LOCK_ALL = _LOCKED.where(Invocation.id == bindparam("ids", type_=ARRAY(BigInteger)).any_()).order_by(
    Invocation.id
)
_PARENT = "_stepwise_parent_action"


def admit(session: Session, invocation_id: int, actor: Any = None) -> Action | None:
    """Turn an invocation into an action in its lane, exactly once. None when it was
    already settled (a redelivered message). (``batch_admission.admit_all`` admits many
    at once.)"""
    row = session.execute(_LOCK, {"invocation_id": invocation_id}).one_or_none()
    if row is None or row[0].settled_at is not None:
        return None
    candidate, settled = prepare(session, *row, actor=actor)
    return candidate if settled else obtain(session, candidate, row[0])


def prepare(
    session: Session, invocation: Invocation, parent: Action | None, actor: Any = None
) -> tuple[Action, bool]:
    """The candidate action of a locked, unsettled ``invocation`` (``parent``: its parent
    step's action), its keys, checksum and timeout computed and its ``before`` hook run:
    ``(candidate, False)`` to be obtained in its lane, or ``(outcome, True)`` when the
    invocation settled without becoming an action (failed, skipped, cancelled…)."""
    setattr(invocation, _PARENT, parent)
    try:
        if actor is None:
            actor = registry.load_actor(session, invocation.actor_type, invocation.actor_id)
        definition = find_or_add(type(actor), invocation.name)
        args = list(arguments.load(session, invocation.arguments_json))
    except (ActorNotFound, UnknownAction) as error:
        return fail_unadmitted(session, invocation, error), True
    candidate = rows.transient(
        Action,
        {
            "actor_type": invocation.actor_type,
            "actor_id": invocation.actor_id,
            "name": invocation.name,
            "arguments_json": invocation.arguments_json,
            "status": status.PENDING,
            "root": parent is None,
            "root_id": parent.tree_id if parent is not None else None,
            "outbound": definition.outbound,
            "job": getattr(definition.job, "actor_name", None),
            "current_step_index": 0,
        },
    )
    candidate.__dict__["_actor"] = actor
    candidate.__dict__["_arguments"] = args
    # Keys are computed from the original arguments, before ``before`` may change them. Like
    # ``before``, the key, checksum and timeout callables are user code: a handled error in
    # one fails the invocation instead of failing every delivery of its message.
    failure = run_user_code(_compute_options, definition, candidate, actor, args)
    if failure is None and definition.before_hook is not None:
        failure = run_user_code(definition.before_hook, actor, candidate, *args)
    if failure is None and candidate.status == status.PENDING:
        candidate.store_arguments()
        failure = run_user_code(_compute_checksum, definition, candidate, actor)
    if failure is not None:
        candidate.status = status.FAILED
        candidate.record_error(failure)
        return settle_unadmitted(session, invocation, candidate, "failed", error=failure), True
    if candidate.status != status.PENDING:
        return settle_unadmitted(session, invocation, candidate, candidate.status), True
    return candidate, False


def obtain(session: Session, candidate: Action, invocation: Invocation) -> Action:
    """Admit a prepared ``candidate`` to its lane (``obtain_for``) and settle its
    invocation as admitted when it became an action: the admitted or reused action, or
    the unsaved candidate with its final status."""
    result = obtain_for(session, candidate, invocation, _parent_action(session, invocation))
    if result is candidate and candidate.id is not None and invocation.settled_at is None:
        _settle(session, invocation, "admitted", candidate)
    return result


def _compute_options(definition: Definition, candidate: Action, actor: Any, args: list[Any]) -> None:
    tenancy, key = candidate.tenancy_key, definition.key
    candidate.concurrency_key = key(definition.concurrency_key, actor, args, tenancy, "concurrency_key")
    candidate.checksum_key = key(definition.checksum_key, actor, args, tenancy, "checksum_key")
    candidate.timeout_seconds = definition.timeout_seconds(actor, args)


def _compute_checksum(definition: Definition, candidate: Action, actor: Any) -> None:
    candidate.checksum = definition.checksum_value(actor, candidate.arguments)


def _parent_action(session: Session, invocation: Invocation) -> Action | None:
    if hasattr(invocation, _PARENT):  # read with the invocation's lock
        return getattr(invocation, _PARENT)  # type: ignore[no-any-return]
    if invocation.parent_step_id is None:
        return None
    return session.scalars(
        select(Action).join(Step, Step.action_id == Action.id).where(Step.id == bindparam("step_id")),
        {"step_id": invocation.parent_step_id},
    ).one_or_none()


def _settle(session: Session, invocation: Invocation, outcome: str, action: Action | None) -> None:
    """The invocation is settled with ``outcome``; one that became (or joined) ``action``
    names it, and so does its parent step's edge to it. On PostgreSQL that is one
    statement (the UPDATE and the edge's INSERT in one CTE), written now: the invocation
    row is locked already, by ``admit``'s first read."""
    now = clock.now()
    if action is None or action.id is None or session.get_bind().dialect.name != "postgresql":
        invocation.settled_at, invocation.outcome = now, outcome
        if action is not None and action.id is not None:
            invocation.action_id = action.id
            if invocation.parent_step_id is not None:
                link(session, invocation.parent_step_id, action.id)
        return
    values = {"settled_at": now, "outcome": outcome, "action_id": action.id}
    session.connection().execute(_SETTLED_AND_LINKED, {"invocation_id": invocation.id, **values})
    rows.set_committed(invocation, values)


_invocations = Invocation.__table__.c
_settled = (
    update(Invocation.__table__)  # type: ignore[arg-type]
    .where(_invocations.id == bindparam("invocation_id"))
    .values(
        settled_at=bindparam("settled_at"), outcome=bindparam("outcome"), action_id=bindparam("action_id")
    )
    .returning(_invocations.parent_step_id)
    .cte("settled")
)
#: Settle an invocation as the action it became or joined, and link its parent step to
#: that action (once): one statement on PostgreSQL.
_SETTLED_AND_LINKED = (
    pg_insert(step_actions)
    .from_select(
        ["parent_step_id", "child_action_id"],
        select(_settled.c.parent_step_id, bindparam("action_id", type_=BigInteger)).where(
            _settled.c.parent_step_id.is_not(None)
        ),
    )
    .on_conflict_do_nothing(index_elements=["parent_step_id", "child_action_id"])
    .add_cte(_settled)
)


def attach(session: Session, invocation: Invocation, existing: Action) -> Action:
    """The same work is already in the lane: wait on it instead of queueing a copy."""
    _settle(session, invocation, "attached", existing)
    history.record(session, existing, "attached", invocation_id=invocation.id)
    return existing


def fail_unadmitted(
    session: Session, invocation: Invocation, error: BaseException, cause: str = history.WORKER
) -> Action:
    """The invocation ends failed without becoming an action (its actor or definition is
    gone, or the sweeper gave up on it)."""
    candidate = Action(
        actor_type=invocation.actor_type,
        actor_id=invocation.actor_id,
        name=invocation.name,
        status=status.FAILED,
    )
    candidate.record_error(error)
    return settle_unadmitted(session, invocation, candidate, "failed", error=error, cause=cause)


def settle_unadmitted(
    session: Session,
    invocation: Invocation,
    candidate: Action,
    outcome: str,
    error: BaseException | None = None,
    cause: str = history.WORKER,
) -> Action:
    """The invocation ends without becoming an action: record why, and conclude the
    parent step (successfully only when the candidate ended succeeded)."""

    _settle(session, invocation, outcome, None)
    invocation.concluded_at = clock.now()
    invocation.succeeded = candidate.status == status.SUCCEEDED
    if error is not None:
        invocation.error_class = error_class(error)
        invocation.error_message = str(error)[:2000]
    parent = _parent_action(session, invocation)
    data: dict[str, Any] = {"name": candidate.name, "actor": f"{candidate.actor_type}/{candidate.actor_id}"}
    if error is not None:
        data.update(error_data(error))
    history.record(session, parent, f"invocation_{outcome}", cause=cause, invocation_id=invocation.id, **data)
    if invocation.parent_step_id is not None:
        conclude(session, invocation.parent_step_id, candidate.status == status.SUCCEEDED)
    return candidate


def obtain_for(
    session: Session, candidate: Action, invocation: Invocation, parent_action: Action | None = None
) -> Action:
    """Admit ``candidate`` (invoked by a step of ``parent_action``, if any) to its lane: skip
    it, deadlock it, attach it to the same work, or queue it (superseding older queued
    work). Returns the admitted or reused action, or the unsaved candidate with its final
    status."""

    key = candidate.concurrency_key
    # The lane is read (and locked) before founding it, never founded blind: a lane whose
    # last action is completing is locked by that transaction, and waiting for it here is
    # what makes the next action's start come after that completion (its ``started_at``
    # is taken after the wait, by ``founding.found``).
    on_postgres = session.get_bind().dialect.name == "postgresql"
    while True:
        lane = performance.lock(session, key)
        if achievement.exists(session, candidate.checksum_key, candidate.checksum):
            candidate.status = status.SUCCEEDED
            invocation.checksum_key = candidate.checksum_key
            return settle_unadmitted(session, invocation, candidate, "skipped")
        if lane is None:
            if on_postgres:
                if founding.found(session, candidate, invocation):
                    return candidate
                continue  # another admission founded the lane meanwhile: lock it
            session.add(candidate)
            session.flush()
            lane_id = performance.create(session, candidate)
            if lane_id is None:
                # Another admission created the lane first: lock it and share it.
                session.delete(candidate)
                session.flush()
                make_transient(candidate)
                candidate.id = None  # type: ignore[assignment]
                continue
            history.record(session, candidate, "admitted", lane=key, invocation_id=invocation.id)
            perform(session, candidate)
            return candidate
        current = session.get(Action, lane.action_id, populate_existing=True)
        if (
            current is not None
            and parent_action is not None
            and ancestors_include(session, {parent_action.id}, current.id)
        ):
            return deadlock(session, candidate, invocation, current)
        members = lane_actions(session, lane)
        if candidate.checksum is not None:
            for existing in members:
                # Invariant 5: only work that will still conclude can be shared.
                if (
                    existing.status in status.INCOMPLETE
                    and existing.checksum_key == candidate.checksum_key
                    and existing.checksum == candidate.checksum
                ):
                    return attach(session, invocation, existing)
        session.add(candidate)
        session.flush()
        history.record(session, candidate, "queued", lane=key, invocation_id=invocation.id)
        for queued in members:
            if queued.status == status.PENDING and queued.id != lane.action_id:
                supersede(session, queued, candidate)
        return candidate


def supersede(session: Session, old: Action, new: Action) -> None:
    """``new`` replaces the queued ``old``: everyone waiting on ``old`` now waits on ``new``."""

    # It leaves the lane with the same write (membership is the key and an incomplete
    # status): a lane that never drains keeps only its live members in the lane index, and
    # admission reads only those (not every action superseded so far).
    if not write_status(
        session,
        old,
        status.SUPERSEDED,
        completed_at=new.created_at,
        superseded_by_id=new.id,
    ):
        return
    session.execute(
        update(Invocation)
        .where(Invocation.action_id == old.id, Invocation.concluded_at.is_(None))
        .values(action_id=new.id)
        .execution_options(synchronize_session=False)
    )
    parents = session.scalars(
        select(step_actions.c.parent_step_id).where(step_actions.c.child_action_id == old.id)
    ).all()
    for step_id in parents:
        link(session, step_id, new.id)
    history.record(session, old, "superseded", by_action_id=new.id)


def deadlock(session: Session, candidate: Action, invocation: Invocation, holder: Action) -> Action:

    error = Deadlock(
        f"{candidate.name} on {candidate.actor_type}/{candidate.actor_id} would wait for lane "
        f"{candidate.concurrency_key!r}, held by its ancestor action {holder.id} ({holder.name})"
    )
    if not handles(error):
        raise error
    candidate.status = status.DEADLOCKED
    candidate.record_error(error)
    return settle_unadmitted(session, invocation, candidate, "deadlocked", error=error)


def lane_actions(session: Session, lane: Performance) -> list[Action]:
    """The lane's live members: its current action and those queued behind it, oldest first."""
    return list(
        session.scalars(
            select(Action)
            .where(Action.concurrency_key == lane.concurrency_key, Action.status.in_(performance.LIVE))
            .order_by(Action.id)
            .execution_options(populate_existing=True)
        )
    )


def ancestors_include(session: Session, start_ids: set[int], target_id: int) -> bool:
    """Whether ``target_id`` is among ``start_ids`` or their ancestors through parent steps,
    following every link, including those added by reuse and superseding."""

    seen: set[int] = set()
    frontier = set(start_ids)
    while frontier:
        if target_id in frontier:
            return True
        seen |= frontier
        parents = session.scalars(
            select(Step.action_id)
            .join(step_actions, step_actions.c.parent_step_id == Step.id)
            .where(step_actions.c.child_action_id.in_(frontier))
            .distinct()
        ).all()
        frontier = set(parents) - seen
    return False
