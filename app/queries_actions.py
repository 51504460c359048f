"""The read model of the overview and the actions list. It only reads.

Every query here is bounded, so a page costs about the same with a thousand actions or a
hundred million:

- the list is a keyset page (``WHERE id < :before ORDER BY id DESC LIMIT n``) on the index
  that matches the filter, and its count stops at ``queries.CAP``;
- the throughput chart aggregates one time window of ``ix_stepwise_actions_completed_at``;
- the oldest pending actions per lane and the stuck actions read at most ``SCAN`` rows of
  ``ix_stepwise_actions_status`` (the oldest first), and the usual duration of an action
  name is the median of its last ``USUAL_SAMPLE`` successful runs (``ix_stepwise_actions_name``).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Integer, Select, cast, func, literal_column, select
from sqlalchemy.orm import Session

from engine import registry, status
from engine.commands import ActionFilter
from engine.models import Action, AuditEntry, Performance

from .queries import CAP, Count, capped_count

#: Rows of one page of the actions list.
PAGE_SIZE = 50
#: How many pending or performing actions (the oldest first) the overview reads at most.
SCAN = 10_000
#: Successful runs of an action name whose median is its usual duration.
USUAL_SAMPLE = 200
#: Lanes shown by the overview's "oldest pending" panel, and stuck actions shown.
TOP = 20


# --- the actions list ------------------------------------------------------------------------

#: The columns a row shows (never the traceback or the result payload), in ActionRow's order.
ROW_COLUMNS = (
    Action.id,
    Action.name,
    Action.actor_type,
    Action.actor_id,
    Action.status,
    Action.concurrency_key,
    Action.root,
    Action.root_id,
    Action.outbound,
    Action.arguments_json,
    Action.created_at,
    Action.started_at,
    Action.completed_at,
    Action.deadline_at,
)


@dataclass(frozen=True)
class ActionRow:
    """An action as a row of a list: plain values, safe to cache and to render after the
    request's session is gone."""

    id: int
    name: str
    actor_type: str
    actor_id: str
    status: str
    concurrency_key: str
    root: bool
    root_id: int | None
    outbound: bool
    arguments: list[Any]
    created_at: datetime
    started_at: datetime | None
    completed_at: datetime | None
    deadline_at: datetime | None

    @property
    def actor(self) -> str:
        return f"{self.actor_type}/{self.actor_id}"

    @property
    def tree_id(self) -> int:
        return self.root_id if self.root_id is not None else self.id

    @property
    def arguments_preview(self) -> str:
        """The arguments as JSON, cut at 80 characters."""
        text = json.dumps(self.arguments, ensure_ascii=False, default=str)
        return text if len(text) <= 80 else text[:79] + "…"

    def duration(self, now: datetime) -> timedelta | None:
        """How long it performed (so far, while performing); None before it started."""
        if self.started_at is None:
            return None
        return (self.completed_at or now) - self.started_at


def rows(session: Session, query: Select[Any]) -> list[ActionRow]:
    return [ActionRow(*row) for row in session.execute(query).all()]


def select_rows() -> Select[Any]:
    return select(*ROW_COLUMNS)


@dataclass(frozen=True)
class Page:
    """One keyset page of actions, newest first."""

    rows: list[ActionRow]
    #: Whether there are older (lower id) actions after this page, and newer ones before it.
    has_older: bool
    has_newer: bool

    @property
    def oldest_id(self) -> int | None:
        return self.rows[-1].id if self.rows else None

    @property
    def newest_id(self) -> int | None:
        return self.rows[0].id if self.rows else None


def list_page(
    session: Session,
    where: ActionFilter,
    *,
    before: int | None = None,
    after: int | None = None,
    size: int = PAGE_SIZE,
) -> Page:
    """The ``size`` newest actions matching ``where`` with an id below ``before`` (older), or
    the ``size`` oldest above ``after`` (the page newer than one seen), newest first."""
    query = select_rows().where(*where.conditions())
    if after is not None:
        found = rows(session, query.where(Action.id > after).order_by(Action.id).limit(size + 1))
        return Page(list(reversed(found[:size])), has_older=True, has_newer=len(found) > size)
    if before is not None:
        query = query.where(Action.id < before)
    found = rows(session, query.order_by(Action.id.desc()).limit(size + 1))
    return Page(found[:size], has_older=len(found) > size, has_newer=before is not None)


def matching_count(session: Session, where: ActionFilter, cap: int = CAP) -> Count:
    """How many actions match ``where``, reading at most ``cap + 1`` index entries."""
    ids: Any = where.select_ids()
    return capped_count(session, ids, cap)


def eligible_count(session: Session, where: ActionFilter, statuses: Iterable[str], cap: int = CAP) -> Count:
    """How many actions matching ``where`` are in one of ``statuses`` (what a bulk command
    would change), capped."""
    ids: Any = where.select_ids().where(Action.status.in_(sorted(statuses)))
    return capped_count(session, ids, cap)


def known_names() -> list[str]:
    """Action names of the registered definitions (for the filter's suggestions: a
    ``SELECT DISTINCT name`` would read the whole index)."""
    return sorted({name for (_cls, name) in registry.snapshot()[0]})


def known_actor_types() -> list[str]:
    return sorted({registry.type_name(cls) for (cls, _name) in registry.snapshot()[0]})


def bulk_entry(session: Session, entry_id: int) -> AuditEntry | None:
    """A bulk command's audit entry (with its progress), or None."""
    entry = session.get(AuditEntry, entry_id, populate_existing=True)
    if entry is None or not entry.command.startswith("bulk_"):
        return None
    return entry


# --- throughput and failures over time ---------------------------------------------------------


@dataclass(frozen=True)
class Bucket:
    start: datetime
    end: datetime
    #: Completions in the bucket by status (only statuses with some).
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def bucket_expression(session: Session, seconds: int) -> Any:
    """``completed_at`` as the number of its ``seconds``-long bucket since the epoch (times
    are naive UTC on both databases)."""
    if session.get_bind().dialect.name == "postgresql":
        # date_part is a double precision (extract's numeric is slower to divide).
        return func.floor(func.date_part("epoch", Action.completed_at) / literal_column(str(int(seconds))))
    return cast(func.strftime("%s", Action.completed_at), Integer) / literal_column(str(int(seconds)))


def throughput(session: Session, now: datetime, buckets: int, seconds: int) -> list[Bucket]:
    """Completions by status in ``buckets`` consecutive buckets of ``seconds`` each, the last
    one holding ``now``: one aggregate over a range of ``ix_stepwise_actions_completed_at``."""
    epoch = datetime(1970, 1, 1)
    last = int((now - epoch).total_seconds()) // seconds
    first = last - buckets + 1
    since = epoch + timedelta(seconds=first * seconds)
    number = bucket_expression(session, seconds)
    rows = session.execute(
        select(number.label("n"), Action.status, func.count())
        .where(Action.completed_at >= since, Action.completed_at.is_not(None))
        .group_by(literal_column("n"), Action.status)
    ).all()
    counts: dict[int, dict[str, int]] = {}
    for n, state, found in rows:
        index = int(n) - first
        if 0 <= index < buckets:
            counts.setdefault(index, {})[state] = counts.get(index, {}).get(state, 0) + int(found)
    return [
        Bucket(
            start=since + timedelta(seconds=i * seconds),
            end=since + timedelta(seconds=(i + 1) * seconds),
            counts=counts.get(i, {}),
        )
        for i in range(buckets)
    ]


# --- oldest pending action per lane ------------------------------------------------------------


@dataclass(frozen=True)
class LaneWait:
    """A lane (concurrency key) and its oldest pending action."""

    concurrency_key: str
    oldest: ActionRow
    #: Pending actions of the lane among those read (a lower bound when ``sample_full``).
    pending: int
    #: The lane's current action (performing, or about to), if the lane has one.
    current: ActionRow | None


def oldest_pending_by_lane(
    session: Session, limit: int = TOP, scan: int = SCAN
) -> tuple[list[LaneWait], bool]:
    """The ``limit`` lanes whose oldest pending action is oldest, and whether the ``scan``
    oldest pending actions read were all there is (False: the counts are lower bounds).

    The first lanes met when walking pending actions by id are exactly the lanes with the
    oldest pending actions, so reading the ``scan`` oldest suffices."""
    sample = (
        select(Action.id, Action.concurrency_key)
        .where(Action.status == status.PENDING)
        .order_by(Action.id)
        .limit(scan)
        .subquery()
    )
    found = session.execute(
        select(sample.c.concurrency_key, func.min(sample.c.id).label("oldest"), func.count().label("pending"))
        .group_by(sample.c.concurrency_key)
        .order_by(func.min(sample.c.id))
        .limit(limit)
    ).all()
    read = session.scalar(select(func.count()).select_from(sample)) or 0
    if not found:
        return [], read >= scan
    oldest = {a.id: a for a in rows(session, select_rows().where(Action.id.in_([r.oldest for r in found])))}
    keys = [row.concurrency_key for row in found]
    current = {
        a.concurrency_key: a
        for a in rows(
            session,
            select_rows()
            .join(Performance, Performance.action_id == Action.id)
            .where(Performance.concurrency_key.in_(keys)),
        )
    }
    waits = [
        LaneWait(
            concurrency_key=row.concurrency_key,
            oldest=oldest[row.oldest],
            pending=int(row.pending),
            current=current.get(row.concurrency_key),
        )
        for row in found
        if row.oldest in oldest
    ]
    return waits, read >= scan


# --- stuck actions -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stuck:
    action: ActionRow
    #: "deadline": performing past its deadline (its timeout has not fired); "slow": far
    #: past the usual duration of its name; "outbound": waiting for its completion for long.
    kind: str
    #: How long it has been performing.
    elapsed: timedelta
    #: How long it could perform before it looked stuck (its timeout, the outbound
    #: threshold, or ``factor`` times its usual duration).
    line: timedelta
    #: The usual duration of its name ("slow"), or the outbound threshold ("outbound").
    usual: timedelta | None = None
    deadline_at: datetime | None = None

    @property
    def overdue(self) -> timedelta:
        """How far past its line it is (what the list is sorted by)."""
        return self.elapsed - self.line


def performing_sample(session: Session, scan: int = SCAN) -> list[ActionRow]:
    """The ``scan`` oldest performing actions (the longest-running first, by id)."""
    return rows(
        session, select_rows().where(Action.status == status.PERFORMING).order_by(Action.id).limit(scan)
    )


def usual_duration(session: Session, name: str, sample: int = USUAL_SAMPLE) -> timedelta | None:
    """The median duration of the last ``sample`` successful runs of ``name`` (None: none)."""
    runs = (
        select(Action.started_at, Action.completed_at)
        .where(Action.name == name, Action.status == status.SUCCEEDED)
        .order_by(Action.id.desc())
        .limit(sample)
    )
    seconds = [
        (completed - started).total_seconds()
        for started, completed in session.execute(runs).all()
        if started is not None and completed is not None
    ]
    return timedelta(seconds=statistics.median(seconds)) if seconds else None


def stuck_actions(
    performing: list[ActionRow],
    usual: dict[str, timedelta | None],
    now: datetime,
    *,
    factor: float = 3.0,
    floor: timedelta = timedelta(minutes=1),
    outbound_after: timedelta = timedelta(minutes=30),
) -> list[Stuck]:
    """Which of ``performing`` look stuck, most overdue first:

    - past their deadline (``deadline_at``), so their timeout should have fired;
    - outbound and performing for longer than ``outbound_after`` (waiting for their completion);
    - otherwise performing for longer than ``factor`` times the usual duration of their name
      (``usual``), and at least ``floor`` (a name that usually takes 10 ms is not stuck at 31 ms).
    """
    found: list[Stuck] = []
    for action in performing:
        if action.started_at is None:
            continue
        elapsed = now - action.started_at
        deadline = action.deadline_at
        if deadline is not None and deadline < now:
            line = deadline - action.started_at
            found.append(Stuck(action, "deadline", elapsed, line, deadline_at=deadline))
        elif action.outbound:
            if elapsed > outbound_after:
                found.append(Stuck(action, "outbound", elapsed, outbound_after, usual=outbound_after))
        else:
            typical = usual.get(action.name)
            if typical is not None and elapsed > max(typical * factor, floor):
                found.append(Stuck(action, "slow", elapsed, max(typical * factor, floor), usual=typical))
    found.sort(key=lambda s: s.overdue, reverse=True)
    return found
