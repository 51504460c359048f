"""The read model of lanes (the engine's performances): each concurrency key with its
current action, its pending queue, and why it is not moving (``reasons`` puts the
reasons in words, ``queries_deadlocks`` finds the deadlocks). It only reads.

Lanes show contention: they are listed by queue length (longest first, then the oldest
wait), by oldest wait (the queued action that has waited longest first) or by key, filtered
by key prefix, by a least queue length and by a least wait; a lane whose only action is its
current one has nothing contending for it and is left out unless asked for (``single=True``).
(A newer queued action supersedes the older ones, so a queue seldom holds more than one: the
wait is what tells the contended lanes apart.)

A page of lanes costs a fixed number of queries whatever the number of lanes: one for the
page (the queue lengths and oldest waits of the lanes, one GROUP BY over the lanes' live
members through ix_stepwise_actions_lane), then one per kind of fact (current actions, their
current steps, queues, children, deadlocks), each over the lanes on the page only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Select, and_, func, select
from sqlalchemy.orm import Session

from engine import clock, status
from engine.models import Action, Invocation, Performance, Step

from ..queries import keyset_page, starts_with
from .queries_deadlocks import deadlocks_among
from .reasons import CHILDREN_SHOWN, Reason, progress, timeout

#: The orders of the lanes list: the longest queue first, the oldest wait first, by key.
QUEUE, WAIT, KEY = "queue", "wait", "key"
SORTS = (QUEUE, WAIT, KEY)
#: Lanes on a page, and queued actions shown per lane before "and N more".
PAGE = 50
QUEUE_SHOWN = 5


@dataclass
class Lane:
    id: int
    key: str
    since: datetime
    current: Action | None
    step: Step | None
    reasons: list[Reason] = field(default_factory=list)
    queue: list[Action] = field(default_factory=list)
    #: More pending actions than ``queue`` shows.
    queue_more: bool = False
    #: How many actions wait behind the current one, and since when the first of them.
    queued: int = 0
    oldest_wait: datetime | None = None

    @property
    def outbound(self) -> bool:
        return self.current is not None and self.current.outbound


@dataclass
class LanePage:
    lanes: list[Lane]
    #: The key to continue after, when there are more lanes (the key order).
    next_after: str | None
    #: The next page's number, when there are more lanes (the other orders).
    next_page: int | None = None


def lanes(
    session: Session,
    *,
    prefix: str = "",
    after: str | None = None,
    limit: int | None = None,
    sort: str = KEY,
    single: bool = True,
    min_queue: int = 0,
    waited: timedelta | None = None,
    page: int = 0,
) -> LanePage:
    """A page of lanes. In key order with every lane (``single``, no least queue or wait):
    keyset pagination on the unique index of the key. Otherwise by ``sort`` over the lanes'
    queue lengths and oldest waits, offset by ``page``."""
    limit = limit or PAGE
    if sort == KEY and single and not min_queue and waited is None:
        rows, next_key = keyset_page(
            session, Performance, Performance.concurrency_key, prefix=prefix, after=after, limit=limit
        )
        found = explain(session, rows)
        _count_queues(session, found)
        return LanePage(found, next_key)
    queued = _queued_per_lane()
    query: Select[tuple[Performance, int, datetime | None]] = select(
        Performance, func.coalesce(queued.c.queued, 0), queued.c.oldest
    )
    least = max(min_queue, 0 if single else 1)
    if least > 0 or waited is not None:
        query = query.join(queued, queued.c.lane_id == Performance.id)
        if least > 1:
            query = query.where(queued.c.queued >= least)
        if waited is not None:
            query = query.where(queued.c.oldest <= clock.now() - waited)
    else:
        query = query.outerjoin(queued, queued.c.lane_id == Performance.id)
    if prefix:
        key = Performance.concurrency_key
        query = query.where(*starts_with(session, key, prefix))
    by_wait = (queued.c.oldest.is_(None), queued.c.oldest, Performance.concurrency_key)
    if sort == QUEUE:
        query = query.order_by(func.coalesce(queued.c.queued, 0).desc(), *by_wait)
    elif sort == WAIT:
        query = query.order_by(*by_wait)
    else:
        query = query.order_by(Performance.concurrency_key)
    rows = session.execute(query.offset(page * limit).limit(limit + 1)).all()
    shown = rows[:limit]
    found = explain(session, [row[0] for row in shown])
    for lane, (_, count, oldest) in zip(found, shown, strict=True):
        lane.queued, lane.oldest_wait = count, oldest
    return LanePage(found, None, page + 1 if len(rows) > limit else None)


def _queued_per_lane() -> Any:
    """Per lane: how many pending actions wait behind its current one, and the oldest's time."""
    return (
        select(
            Performance.id.label("lane_id"),
            func.count().label("queued"),
            func.min(Action.created_at).label("oldest"),
        )
        .join(Performance, Performance.concurrency_key == Action.concurrency_key)
        .where(*_QUEUED)
        .group_by(Performance.id)
        .subquery()
    )


#: A lane's queued actions: its live members (ix_stepwise_actions_lane, whose condition is
#: repeated so that SQLite uses that partial index) that are pending, other than the current.
_QUEUED = (
    Action.status.in_((status.PENDING, status.PERFORMING)),
    Action.status == status.PENDING,
    Action.id != Performance.action_id,
)


def _count_queues(session: Session, found: list[Lane]) -> None:
    """The queue length and oldest wait of the lanes on a page (one query over their queues)."""
    if not found:
        return
    rows = session.execute(
        select(Performance.id, func.count(), func.min(Action.created_at))
        .join(Performance, Performance.concurrency_key == Action.concurrency_key)
        .where(Performance.id.in_([lane.id for lane in found]), *_QUEUED)
        .group_by(Performance.id)
    )
    counts = {lane_id: (count, oldest) for lane_id, count, oldest in rows}
    for lane in found:
        lane.queued, lane.oldest_wait = counts.get(lane.id, (0, None))


def lane(session: Session, key: str) -> Lane | None:
    """The lane of ``key``, or None when no action holds it (the lane is idle)."""
    row = session.scalars(select(Performance).where(Performance.concurrency_key == key)).one_or_none()
    if row is None:
        return None
    found = explain(session, [row])
    _count_queues(session, found)
    return found[0]


def queue(
    session: Session, lane_id: int, current_id: int, *, after: int | None = None, limit: int = PAGE
) -> tuple[list[Action], int | None]:
    """A page of a lane's pending actions, oldest first, and the id to continue after."""
    query = (
        select(Action)
        .join(Performance, Performance.concurrency_key == Action.concurrency_key)
        .where(Performance.id == lane_id, Action.status == status.PENDING, Action.id != current_id)
        .order_by(Action.id)
        .limit(limit + 1)
    )
    if after is not None:
        query = query.where(Action.id > after)
    rows = list(session.scalars(query))
    return rows[:limit], rows[limit - 1].id if len(rows) > limit else None


def recent(session: Session, key: str, limit: int = 10) -> list[Action]:
    """The latest actions of a key, completed or not: how the lane has been moving."""
    return list(
        session.scalars(
            select(Action).where(Action.concurrency_key == key).order_by(Action.id.desc()).limit(limit)
        )
    )


# --- explaining -----------------------------------------------------------------------------


def explain(session: Session, performances: list[Performance]) -> list[Lane]:
    """The lanes of ``performances`` with their current action, queue and reasons."""
    if not performances:
        return []
    current_ids = [p.action_id for p in performances]
    currents = {a.id: a for a in session.scalars(select(Action).where(Action.id.in_(current_ids)))}
    steps = {
        s.action_id: s
        for s in session.scalars(
            select(Step)
            .join(
                Action,
                and_(Step.action_id == Action.id, Step.definition_index == Action.current_step_index),
            )
            .where(Action.id.in_(current_ids))
        )
    }
    queued = _queues(session, [p.id for p in performances], current_ids)
    waiting = [s for s in steps.values() if _waits_on_children(s)]
    children = _children(session, [s.id for s in waiting])
    waiting_actions = [currents[s.action_id] for s in waiting if s.action_id in currents]
    deadlocks = deadlocks_among(session, waiting_actions)

    result: list[Lane] = []
    for performance in performances:
        current = currents.get(performance.action_id)
        step = steps.get(performance.action_id)
        lane_queue = queued.get(performance.id, [])
        lane = Lane(
            id=performance.id,
            key=performance.concurrency_key or "",
            since=performance.created_at,
            current=current,
            step=step,
            queue=lane_queue[:QUEUE_SHOWN],
            queue_more=len(lane_queue) > QUEUE_SHOWN,
        )
        if current is not None:
            lane.reasons = [
                *deadlocks.get(current.id, []),
                *progress(current, step, children.get(step.id, []) if step is not None else []),
                *timeout(current),
            ]
        else:
            lane.reasons = [Reason("missing", f"its current action #{performance.action_id} is missing")]
        result.append(lane)
    return result


def _waits_on_children(step: Step) -> bool:
    return (
        step.status == status.STEP_PERFORMING
        and step.performed_at is not None
        and step.pending_actions_count > 0
    )


def _queues(session: Session, lane_ids: list[int], current_ids: list[int]) -> dict[int, list[Action]]:
    """Up to QUEUE_SHOWN + 1 pending actions per lane (the extra one says there are more)."""
    rank = func.row_number().over(partition_by=Performance.id, order_by=Action.id).label("rank")
    ranked = (
        select(Action.id, Performance.id.label("lane_id"), rank)
        .join(Performance, Performance.concurrency_key == Action.concurrency_key)
        .where(
            Performance.id.in_(lane_ids),
            Action.status == status.PENDING,
            Action.id.not_in(current_ids),
        )
        .subquery()
    )
    rows = session.execute(
        select(Action, ranked.c.lane_id)
        .join(ranked, ranked.c.id == Action.id)
        .where(ranked.c.rank <= QUEUE_SHOWN + 1)
        .order_by(Action.id)
    )
    queues: dict[int, list[Action]] = {}
    for action, lane_id in rows:
        queues.setdefault(lane_id, []).append(action)
    return queues


def _children(session: Session, step_ids: list[int]) -> dict[int, list[tuple[Invocation, Action | None]]]:
    """Up to CHILDREN_SHOWN + 1 unconcluded invocations (children and waits) per step."""
    if not step_ids:
        return {}
    rank = (
        func.row_number().over(partition_by=Invocation.parent_step_id, order_by=Invocation.id).label("rank")
    )
    ranked = (
        select(Invocation.id, rank)
        .where(Invocation.parent_step_id.in_(step_ids), Invocation.concluded_at.is_(None))
        .subquery()
    )
    rows = session.execute(
        select(Invocation, Action)
        .join(ranked, ranked.c.id == Invocation.id)
        .outerjoin(Action, Action.id == Invocation.action_id)
        .where(ranked.c.rank <= CHILDREN_SHOWN + 1)
        .order_by(Invocation.id)
    )
    children: dict[int, list[tuple[Invocation, Action | None]]] = {}
    for invocation, action in rows:
        children.setdefault(invocation.parent_step_id or 0, []).append((invocation, action))
    return children
