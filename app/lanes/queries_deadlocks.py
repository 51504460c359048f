"""Deadlocks in the lanes page's explanations: the cycle from the ancestor holding a lane
to the descendant that wants it, read from the invocations that ended deadlocked."""

from __future__ import annotations

import re

from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session

from engine import status
from engine.models import Action, Invocation, Step, step_actions

from .reasons import Link, Reason

DEADLOCK_CLASS = "engine.errors.Deadlock"
#: The engine's Deadlock message names the lane and the ancestor holding it.
DEADLOCK_MESSAGE = re.compile(
    r"would wait for lane (?P<q>['\"])(?P<key>.*)(?P=q), held by its ancestor action (?P<holder>\d+)"
)


# --- deadlocks ------------------------------------------------------------------------------


def deadlocks_among(session: Session, actions: list[Action]) -> dict[int, list[Reason]]:
    """Deadlocks under each action since it (re)started: invocations below it that would
    wait for a lane held by their own ancestor. A handled one ended ``deadlocked`` and fails
    the steps above it; an unhandled one stays unadmitted, the Deadlock stored on it, and
    its step waits for ever."""
    if not actions:
        return {}
    trees = {a.tree_id for a in actions}
    rows = session.execute(
        select(Invocation, Step.action_id)
        .join(Step, Step.id == Invocation.parent_step_id)
        .join(Action, Action.id == Step.action_id)
        .where(
            or_(Action.root_id.in_(trees), Action.id.in_(trees)),
            or_(
                Invocation.outcome == status.DEADLOCKED,
                and_(Invocation.settled_at.is_(None), Invocation.error_class == DEADLOCK_CLASS),
            ),
        )
        .order_by(Invocation.id.desc())
        .limit(20)
    )
    found: dict[int, list[Reason]] = {}
    for invocation, parent_id in rows:
        for action in actions:
            if action.started_at is not None and invocation.created_at < action.started_at:
                continue  # before an operator's retry reopened it
            path = chain(session, action.id, parent_id)
            if path is not None:
                found.setdefault(action.id, []).append(_deadlock_reason(session, invocation, path))
    return found


def chain(session: Session, ancestor_id: int, action_id: int, depth: int = 100) -> list[int] | None:
    """The actions from ``ancestor_id`` down to ``action_id`` through parent steps, or None
    when ``action_id`` does not descend from (nor is) ``ancestor_id``."""
    parents: dict[int, int] = {}
    frontier = {action_id}
    seen = {action_id}
    for _ in range(depth):
        if ancestor_id in frontier:
            path = [ancestor_id]
            while path[-1] != action_id:
                path.append(parents[path[-1]])
            return path
        rows = session.execute(
            select(step_actions.c.child_action_id, Step.action_id)
            .join(Step, Step.id == step_actions.c.parent_step_id)
            .where(step_actions.c.child_action_id.in_(frontier))
        )
        frontier = set()
        for child, parent in rows:
            if parent not in seen:
                seen.add(parent)
                parents[parent] = child
                frontier.add(parent)
        if not frontier:
            return None
    return None


def _deadlock_reason(session: Session, invocation: Invocation, path: list[int]) -> Reason:
    match = DEADLOCK_MESSAGE.search(invocation.error_message or "")
    holder_id = int(match.group("holder")) if match else path[0]
    key = match.group("key") if match else None
    if holder_id in path:
        path = path[path.index(holder_id) :]
    names = {a.id: a for a in session.scalars(select(Action).where(Action.id.in_([*path, holder_id])))}
    holder = names.get(holder_id)
    parent = names.get(path[-1])
    lane_text = f"lane {key}" if key is not None else "its own lane"
    handled = invocation.outcome == status.DEADLOCKED
    what = (
        "it ended deadlocked, so the step waiting on it fails"
        if handled
        else "Deadlock is not handled, so it stays unadmitted and its step waits"
    )
    text = (
        f"deadlock: {invocation.name} on {invocation.actor_type}/{invocation.actor_id}, started by action "
        f"#{path[-1]} ({parent.name if parent else '?'}), would wait for {lane_text}, which its ancestor "
        f"action #{holder_id} ({holder.name if holder else '?'}) holds ({what}); the cycle:"
    )
    links = [Link(names[i].name, i, names[i].status) if i in names else Link("?", i) for i in path]
    links.append(Link(f"{invocation.name} (invocation #{invocation.id}, wants {lane_text})"))
    if holder is not None:
        links.append(Link(holder.name, holder.id, holder.status))
    return Reason(
        "deadlock", text, at=invocation.settled_at or invocation.created_at, links=links, joiner=" → "
    )
