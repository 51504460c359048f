"""What the completion webhook reads: the outbound action current in its lane for an actor
and a name (the one ``engine.complete`` would complete) and, when there is none, the latest
action of that name (to answer why it is not completed). It only reads."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from engine.models import Action, Performance


def current_outbound(session: Session, actor_type: str, actor_id: str, name: str) -> int | None:
    """The id of the outbound action current in its lane for this actor and name (the oldest
    when there are several lanes), as ``engine.complete`` would choose it."""
    return session.scalar(
        select(Performance.action_id)
        .where(Performance.outbound_complete_key == f"{actor_type}/{actor_id}/{name}")
        .order_by(Performance.action_id)
        .limit(1)
    )


def latest_action(session: Session, actor_type: str, actor_id: str, name: str) -> Action | None:
    return session.scalars(
        select(Action)
        .where(Action.actor_type == actor_type, Action.actor_id == actor_id, Action.name == name)
        .order_by(Action.id.desc())
        .limit(1)
    ).first()
