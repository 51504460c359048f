"""The read model of the JSON API (the completion webhook's lookups are ``app.webhooks.queries``).
It only reads.

Every list is a keyset page (``WHERE id < :before ORDER BY id DESC LIMIT n + 1``) on an
index of the engine's tables, so the hundredth page costs what the first does; nothing
counts a whole table.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from engine import status
from engine.commands import ActionFilter
from engine.models import Action, ActionEvent, Compensation, Invocation, Performance, Step
from engine.signal import SIGNAL_WAIT
from engine.step import step_actions

from ..schemas import MAX_ID

T = TypeVar("T")

#: History events that carry an error (``error_class``, ``error_message``, ``traceback``).
ERROR_EVENTS = ("attempt_failed", "step_errored", "step_failed", "callback_failed", "completed")

#: The most nodes one tree answer holds; a bigger tree is cut off (``truncated``).
TREE_LIMIT = 5_000

#: Ids per ``IN (...)`` list.
CHUNK = 500


@dataclass
class Page(Generic[T]):
    """One keyset page, newest first; ``next_before`` is the cursor of the next, if any."""

    items: list[T]
    next_before: int | None


def chunks(ids: Sequence[int], size: int = CHUNK) -> Iterable[Sequence[int]]:
    for start in range(0, len(ids), size):
        yield ids[start : start + size]


def actions_page(session: Session, where: ActionFilter, before: int | None, limit: int) -> Page[Action]:
    query = select(Action).where(*where.conditions())
    if before is not None:
        query = query.where(Action.id < before)
    rows = list(session.scalars(query.order_by(Action.id.desc()).limit(limit + 1)))
    more = len(rows) > limit
    rows = rows[:limit]
    return Page(rows, rows[-1].id if more and rows else None)


def action(session: Session, action_id: int) -> Action | None:
    if not 1 <= action_id <= MAX_ID:
        return None
    return session.get(Action, action_id)


def steps_of(session: Session, action_ids: Sequence[int]) -> dict[int, list[Step]]:
    """The steps of each action, in order."""
    found: dict[int, list[Step]] = {i: [] for i in action_ids}
    for part in chunks(list(action_ids)):
        for step in session.scalars(
            select(Step).where(Step.action_id.in_(part)).order_by(Step.action_id, Step.id)
        ):
            found[step.action_id].append(step)
    return found


def children_of(session: Session, step_ids: Sequence[int]) -> dict[int, list[int]]:
    """The child action ids each step waited on, in id order."""
    found: dict[int, list[int]] = {i: [] for i in step_ids}
    for part in chunks(list(step_ids)):
        for step_id, child_id in session.execute(
            select(step_actions.c.parent_step_id, step_actions.c.child_action_id)
            .where(step_actions.c.parent_step_id.in_(part))
            .order_by(step_actions.c.parent_step_id, step_actions.c.child_action_id)
        ):
            found[step_id].append(child_id)
    return found


def open_waits_of(session: Session, action_id: int) -> list[Invocation]:
    """The action's waits for signals not yet satisfied, oldest first."""
    return list(
        session.scalars(
            select(Invocation)
            .join(Step, Step.id == Invocation.parent_step_id)
            .where(
                Step.action_id == action_id,
                Invocation.kind == "wait",
                Invocation.name == SIGNAL_WAIT,
                Invocation.concluded_at.is_(None),
            )
            .order_by(Invocation.id)
        )
    )


@dataclass(frozen=True)
class Parent:
    step_id: int
    step_index: int
    action_id: int


def parents_of(session: Session, action_id: int) -> list[Parent]:
    """The steps that waited on this action (more than one when reuse attached it)."""
    rows = session.execute(
        select(Step.id, Step.definition_index, Step.action_id)
        .join(step_actions, step_actions.c.parent_step_id == Step.id)
        .where(step_actions.c.child_action_id == action_id)
        .order_by(Step.id)
    )
    return [Parent(step_id, index, parent_id) for step_id, index, parent_id in rows]


def errors_of(session: Session, action_id: int) -> list[ActionEvent]:
    """Every error in the action's history, oldest first: each failed attempt's, each
    failed step's and callback's, and the one it completed with."""
    events = session.scalars(
        select(ActionEvent)
        .where(ActionEvent.action_id == action_id, ActionEvent.event.in_(ERROR_EVENTS))
        .order_by(ActionEvent.id)
    )
    return [e for e in events if isinstance(e.data, dict) and e.data.get("error_class")]


@dataclass
class Tree:
    """The actions under one action, found level by level along the steps' edges."""

    root_id: int
    actions: dict[int, Action] = field(default_factory=dict)
    steps: dict[int, list[Step]] = field(default_factory=dict)
    children: dict[int, list[int]] = field(default_factory=dict)
    truncated: bool = False


def tree(session: Session, root: Action, limit: int | None = None) -> Tree:
    """``root`` and every action below it, including work attached from another tree by
    reuse: a few queries per level, whatever the tree's size; at most ``limit`` actions
    (default ``TREE_LIMIT``)."""
    limit = TREE_LIMIT if limit is None else limit
    found = Tree(root.id, {root.id: root})
    level = [root.id]
    while level:
        steps = steps_of(session, level)
        found.steps.update(steps)
        step_ids = [s.id for group in steps.values() for s in group]
        edges = children_of(session, step_ids)
        found.children.update(edges)
        new = sorted({c for kids in edges.values() for c in kids} - found.actions.keys())
        if len(found.actions) + len(new) > limit:
            new = new[: max(0, limit - len(found.actions))]
            found.truncated = True
        for part in chunks(new):
            for row in session.scalars(select(Action).where(Action.id.in_(part))):
                found.actions[row.id] = row
        level = [i for i in new if i in found.actions]
    return found


@dataclass(frozen=True)
class LaneFilter:
    concurrency_key: str | None = None
    #: Only lanes whose current action is outbound (waiting for a completion).
    outbound: bool | None = None


def lanes_page(
    session: Session, where: LaneFilter, before: int | None, limit: int
) -> Page[tuple[Performance, Action | None]]:
    query = select(Performance, Action).outerjoin(Action, Action.id == Performance.action_id)
    if where.concurrency_key:
        query = query.where(Performance.concurrency_key == where.concurrency_key)
    if where.outbound is True:
        query = query.where(Performance.outbound_complete_key.is_not(None))
    elif where.outbound is False:
        query = query.where(Performance.outbound_complete_key.is_(None))
    if before is not None:
        query = query.where(Performance.id < before)
    rows: list[tuple[Performance, Action | None]] = [
        (lane, current)
        for lane, current in session.execute(query.order_by(Performance.id.desc()).limit(limit + 1))
    ]
    more = len(rows) > limit
    rows = rows[:limit]
    return Page(rows, rows[-1][0].id if more and rows else None)


def queued_counts(session: Session, lane_ids: Sequence[int]) -> dict[int, int]:
    """How many pending actions wait in each lane (behind its current one)."""
    found = dict.fromkeys(lane_ids, 0)
    for part in chunks(list(lane_ids)):
        for lane_id, count in session.execute(
            select(Performance.id, func.count())
            .join(Action, Action.concurrency_key == Performance.concurrency_key)
            .where(Performance.id.in_(part), Action.status == status.PENDING)
            .group_by(Performance.id)
        ):
            if lane_id is not None:
                found[lane_id] = count
    return found


def compensations_of(session: Session, action: Action) -> list[dict[str, Any]]:
    """What the action's steps registered to undo their work, in turn (then as registered):
    no query for an action that registered none."""
    if not action.compensations_count:
        return []
    rows = session.scalars(
        select(Compensation)
        .where(Compensation.action_id == action.id)
        .order_by(Compensation.sequence.is_(None), Compensation.sequence, Compensation.id)
    )
    return [
        {
            "id": c.id,
            "name": c.name,
            "actor_type": c.actor_type,
            "actor_id": c.actor_id,
            "status": c.status,
            "sequence": c.sequence,
            "undoes_step_id": c.step_id,
            "step_id": c.compensation_step_id,
            "error_class": c.error_class,
            "error_message": c.error_message,
        }
        for c in rows
    ]
