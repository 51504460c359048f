"""The overview's read model: what needs attention, throughput and failures over time, the
oldest pending action per lane, the stuck actions and the runs per definition. It only reads.

Every query here is bounded, so the overview costs about the same with a thousand actions or
a hundred million:

- waiting approvals and live counts read the range of ``ix_stepwise_actions_status`` for
  performing actions (live work only), and their counts stop at ``app.queries.CAP``;
- the throughput chart aggregates one time window of ``ix_stepwise_actions_completed_at``,
  and the runs per definition the ``SCAN`` newest completions of that window;
- the oldest pending actions per lane and the stuck actions read at most ``SCAN`` rows of
  ``ix_stepwise_actions_status`` (the oldest first), and the usual duration of an action
  name is the median of its last ``USUAL_SAMPLE`` successful runs (``ix_stepwise_actions_name``).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Integer, cast, func, literal_column, select
from sqlalchemy.orm import Session

from engine import status
from engine.models import Action, Performance

from ..actions.queries import FAILURE_STATUSES, SCAN, ActionRow, rows, select_rows
from ..queries import Count, capped_count

#: Successful runs of an action name whose median is its usual duration.
USUAL_SAMPLE = 200
#: Lanes shown by the overview's "oldest pending" panel, and stuck actions shown.
TOP = 20

__all__ = ["SCAN", "TOP"]


# --- needs attention ---------------------------------------------------------------------------


def failed_roots(session: Session, limit: int = 5) -> tuple[list[ActionRow], Count]:
    """The newest roots of failed or timed-out trees (awaiting an operator's decision: retry
    or leave them), and how many there are (capped)."""
    where = (Action.status.in_(sorted(FAILURE_STATUSES)), Action.root.is_(True))
    found = rows(session, select_rows().where(*where).order_by(Action.id.desc()).limit(limit))
    ids: Any = select(Action.id).where(*where)
    return found, capped_count(session, ids)


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
    one holding ``now``: one aggregate over a range of ``ix_stepwise_actions_completed_at``
    (bounded above too, so the older bars of a window are read without the newest)."""
    epoch = datetime(1970, 1, 1)
    last = int((now - epoch).total_seconds()) // seconds
    first = last - buckets + 1
    since = epoch + timedelta(seconds=first * seconds)
    until = epoch + timedelta(seconds=(last + 1) * seconds)
    number = bucket_expression(session, seconds)
    rows = session.execute(
        select(number.label("n"), Action.status, func.count())
        .where(Action.completed_at >= since, Action.completed_at < until, Action.completed_at.is_not(None))
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


# --- runs per definition -----------------------------------------------------------------------


@dataclass(frozen=True)
class DefinitionStats:
    """How one action name ran in a time window: runs that ended (succeeded, failed or
    timed out), how many succeeded, and the median and 95th percentile of their duration."""

    actor_type: str
    name: str
    runs: int
    succeeded: int
    p50: timedelta | None
    p95: timedelta | None

    @property
    def success_rate(self) -> float | None:
        return self.succeeded / self.runs if self.runs else None


#: Statuses of a run that ended on its own (not cancelled or superseded).
RAN = (status.SUCCEEDED, status.FAILED, status.TIMED_OUT)


def percentile(values: list[float], fraction: float) -> float | None:
    """The ``fraction`` percentile of sorted ``values``, interpolated as PostgreSQL's
    ``percentile_cont`` does."""
    if not values:
        return None
    at = fraction * (len(values) - 1)
    low = int(at)
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (at - low)


def definition_stats(
    session: Session, since: datetime, scan: int = SCAN
) -> tuple[list[DefinitionStats], bool]:
    """Runs per action name (and actor type) among the ``scan`` newest completions since
    ``since`` (a range of ``ix_stepwise_actions_completed_at``), the most runs first; and
    whether that sample was full (then the figures are of the newest ``scan``)."""
    sample = (
        select(Action.actor_type, Action.name, Action.status, Action.started_at, Action.completed_at)
        .where(Action.completed_at >= since, Action.status.in_(RAN))
        .order_by(Action.completed_at.desc())
        .limit(scan)
        .subquery()
    )
    postgres = session.get_bind().dialect.name == "postgresql"
    if postgres:
        seconds: Any = func.extract("epoch", sample.c.completed_at - sample.c.started_at)
        found = session.execute(
            select(
                sample.c.actor_type,
                sample.c.name,
                func.count(),
                func.count().filter(sample.c.status == status.SUCCEEDED),
                func.percentile_cont(0.5).within_group(seconds),
                func.percentile_cont(0.95).within_group(seconds),
            ).group_by(sample.c.actor_type, sample.c.name)
        ).all()
        stats = [
            DefinitionStats(
                actor_type,
                name,
                int(runs),
                int(ok),
                timedelta(seconds=float(p50)) if p50 is not None else None,
                timedelta(seconds=float(p95)) if p95 is not None else None,
            )
            for actor_type, name, runs, ok, p50, p95 in found
        ]
    else:
        by_name: dict[tuple[str, str], tuple[list[int], list[float]]] = {}
        for actor_type, name, state, started, completed in session.execute(select(sample)):
            counts, durations = by_name.setdefault((actor_type, name), ([0, 0], []))
            counts[0] += 1
            counts[1] += state == status.SUCCEEDED
            if started is not None and completed is not None:
                durations.append((completed - started).total_seconds())
        stats = []
        for (actor_type, name), (counts, durations) in by_name.items():
            durations.sort()
            p50, p95 = percentile(durations, 0.5), percentile(durations, 0.95)
            stats.append(
                DefinitionStats(
                    actor_type,
                    name,
                    counts[0],
                    counts[1],
                    timedelta(seconds=p50) if p50 is not None else None,
                    timedelta(seconds=p95) if p95 is not None else None,
                )
            )
    read = sum(s.runs for s in stats)
    stats.sort(key=lambda s: (-s.runs, s.actor_type, s.name))
    return stats, read >= scan
