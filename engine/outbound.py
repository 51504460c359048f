"""Outbound completion: finishing an action from outside (a webhook, an operator, a job).

Completing is idempotent: the second completion of an action returns a falsy
``Completion`` whose reason is ``"already_completed"`` and changes nothing (invariant 2).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, object_session

from . import broker, clock, db, history, registry, status
from .action import Action
from .completing import Completion
from .completing import complete_action as complete_in_lane
from .completion import forward
from .invocation import Invocation
from .invoke import session_for
from .performance import Performance, outbound_lane
from .step_body import run_ready


def complete(
    actor: Any,
    name: str,
    to: str = status.SUCCEEDED,
    *,
    cause: str = history.CALLER,
    by: str | None = None,
    note: str | None = None,
) -> Completion:
    """Complete the outbound action ``name`` that is current in its lane on ``actor``.

    If the actor and name hold several lanes, the lane whose current action is oldest is
    completed. Only a lane's current action is addressable this way; use
    ``complete_action`` for a specific one."""
    session, own = session_for(actor)
    actor_type, actor_id = registry.actor_ref(actor)

    def work() -> Completion:
        return _complete_current(session, actor_type, actor_id, name, to, cause=cause, by=by, note=note)

    try:
        return _run(session, work, callers_session=not own)
    finally:
        if own:
            session.close()


def _complete_current(
    session: Session, actor_type: str, actor_id: str, name: str, to: str, **how: Any
) -> Completion:
    lane = outbound_lane(session, f"{actor_type}/{actor_id}/{name}")
    if lane is None:
        last = session.scalars(
            select(Action)
            .where(Action.actor_type == actor_type, Action.actor_id == actor_id, Action.name == name)
            .order_by(Action.id.desc())
            .limit(1)
        ).first()
        if last is not None and last.status in status.TERMINAL:
            return Completion(False, "already_completed", last)
        return Completion(False, "not_found", last)
    current = session.get(Action, lane.action_id, populate_existing=True)
    assert current is not None
    forward(session, lane, current, to, **how)
    return Completion(True, "completed", current)


def complete_action(
    action: Action | int,
    to: str = status.SUCCEEDED,
    *,
    session: Session | None = None,
    cause: str = history.CALLER,
    by: str | None = None,
    note: str | None = None,
) -> Completion:
    """Complete one action by object or id, whether performing or queued (for example
    ``complete_action(action, "cancelled")`` takes a queued action out of its lane)."""
    own = False
    if session is None:
        session = object_session(action) if isinstance(action, Action) else None
    if session is None:
        session, own = db.session(), True
    action_id = action if isinstance(action, int) else action.id

    def work() -> Completion:
        found = session.get(Action, action_id)
        if found is None:
            return Completion(False, "not_found", None)
        return complete_in_lane(session, found, to, cause=cause, by=by, note=note)

    try:
        return _run(session, work, callers_session=not own)
    finally:
        if own:
            session.close()


def complete_later(actor: Any, name: str, to: str = status.SUCCEEDED) -> None:
    """Complete ``name`` on ``actor`` from a worker, after the actor's session commits.

    The request is recorded in that transaction first (an invocation of kind "complete"),
    so that a message the broker loses is sent again by the sweeper. It names the action
    that is current in the lane now, and is carried out once: a redelivered message finds
    it settled instead of completing the next action in the lane."""
    actor_type, actor_id = registry.actor_ref(actor)
    session, own = session_for(actor)
    try:
        target = session.scalar(
            select(Performance.action_id)
            .where(Performance.outbound_complete_key == f"{actor_type}/{actor_id}/{name}")
            .order_by(Performance.action_id)
            .limit(1)
        )
        request = Invocation(
            kind="complete",
            actor_type=actor_type,
            actor_id=actor_id,
            name=name,
            arguments_json=[to],
            action_id=target,
            created_at=clock.now(),
        )
        session.add(request)
        session.flush()
        broker.enqueue(session, broker.COMPLETE, actor_type, actor_id, name, to, target, request.id)
        if own:
            session.commit()
    finally:
        if own:
            session.close()


def complete_requested(request_id: int) -> Completion:
    """Carry out a ``complete_later`` request once: complete its action and settle the
    request in one transaction. A redelivered message finds it settled."""
    with db.session() as session:

        def work() -> Completion:
            request = session.scalars(
                select(Invocation)
                .where(Invocation.id == request_id)
                .with_for_update()
                .execution_options(populate_existing=True)
            ).one_or_none()
            if request is None or request.settled_at is not None:
                return Completion(False, "already_completed", None)
            to = request.arguments_json[0]
            if request.action_id is None:
                completion = _complete_current(
                    session, request.actor_type, request.actor_id, request.name, to
                )
            else:
                found = session.get(Action, request.action_id)
                assert found is not None  # a foreign key
                completion = complete_in_lane(session, found, to)
            request.settled_at, request.outcome = clock.now(), completion.reason
            return completion

        return _run(session, work, callers_session=False)


def _run(session: Session, work: Any, *, callers_session: bool) -> Completion:
    result: Completion = db.retrying(session, work, callers_session=callers_session)
    run_ready(session)
    return result
