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
#: Statuses of an action that ran and failed (what "failures" means on every page).
FAILURE_STATUSES = frozenset({status.FAILED, status.TIMED_OUT})


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
    Action.error_class,
    # A row shows the start of the message; a whole one may be megabytes.
    func.substr(Action.error_message, 1, 500),
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
    error_class: str | None = None
    error_message: str | None = None

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

    @property
    def error_name(self) -> str | None:
        """The error's class without its module (``WarehouseOffline``)."""
        return short_error(self.error_class)


def short_error(error_class: str | None) -> str | None:
    return error_class.rsplit(".", 1)[-1] if error_class else None


@dataclass(frozen=True)
class Cause:
    """Why a failed tree failed: the error of an action below its root that raised."""

    action_id: int
    name: str
    error_class: str
    error_message: str | None

    @property
    def error_name(self) -> str | None:
        return short_error(self.error_class)


def causes(session: Session, roots: Iterable[ActionRow]) -> dict[int, Cause]:
    """For the failed roots among ``roots`` that raised nothing themselves (their failure
    came up from below), the first error raised in their tree: one query on
    ``ix_stepwise_actions_tree`` for a page of roots."""
    ids = sorted({r.id for r in roots if r.root and r.status in FAILURE_STATUSES and not r.error_class})
    if not ids:
        return {}
    found: dict[int, Cause] = {}
    query = (
        select(
            Action.root_id,
            Action.id,
            Action.name,
            Action.error_class,
            func.substr(Action.error_message, 1, 500),
        )
        .where(
            Action.root_id.in_(ids),
            Action.status.in_(sorted(FAILURE_STATUSES)),
            Action.error_class.is_not(None),
        )
        .order_by(Action.root_id, Action.id)
    )
    for root_id, action_id, name, error_class, message in session.execute(query):
        found.setdefault(root_id, Cause(action_id, name, error_class, message))
    return found


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


# --- needs attention ---------------------------------------------------------------------------


#: Outbound actions performing: waiting for a person (an approval) or a webhook.
WAITING = (Action.status == status.PERFORMING, Action.outbound.is_(True))


def waiting_for_people(session: Session, limit: int = TOP) -> tuple[list[ActionRow], Count]:
    """Outbound actions performing (waiting for an approval or an outside completion), the
    oldest first, and how many there are (capped): the range of ``ix_stepwise_actions_status``
    for performing, which holds only live work."""
    query = select_rows().where(*WAITING)
    return rows(session, query.order_by(Action.id).limit(limit)), waiting_count(session)


def waiting_count(session: Session, cap: int = CAP) -> Count:
    """Outbound actions performing: waiting for an approval or an outside completion."""
    return capped_count(session, select(Action.id).where(*WAITING), cap)


def failed_roots(session: Session, limit: int = 5) -> tuple[list[ActionRow], Count]:
    """The newest roots of failed or timed-out trees (awaiting an operator's decision: retry
    or leave them), and how many there are (capped)."""
    where = (Action.status.in_(sorted(FAILURE_STATUSES)), Action.root.is_(True))
    found = rows(session, select_rows().where(*where).order_by(Action.id.desc()).limit(limit))
    return found, capped_count(session, select(Action.id).where(*where))


# --- failures grouped by error -------------------------------------------------------------------


@dataclass(frozen=True)
class ErrorGroup:
    """The failed actions that raised one error class, among those read."""

    error_class: str
    count: int
    newest_id: int
    newest_at: datetime | None
    #: The newest one's message (its start).
    message: str | None
    #: Action names that raised it, the most frequent first (at most a few).
    names: tuple[str, ...] = ()

    @property
    def error_name(self) -> str | None:
        return short_error(self.error_class)


def failure_groups(session: Session, scan: int = SCAN) -> tuple[list[ErrorGroup], bool]:
    """Failed and timed-out actions that raised an error, grouped by its class, the group
    with the newest failure first; and whether the ``scan`` newest failures read were not
    all there is (then the counts are among those). Reads at most ``scan`` entries of
    ``ix_stepwise_actions_error_class`` (the actions with an error, by id)."""
    sample = (
        select(Action.id, Action.error_class, Action.name)
        .where(Action.error_class.is_not(None), Action.status.in_(sorted(FAILURE_STATUSES)))
        .order_by(Action.id.desc())
        .limit(scan)
        .subquery()
    )
    grouped = session.execute(
        select(sample.c.error_class, func.count().label("n"), func.max(sample.c.id).label("newest"))
        .group_by(sample.c.error_class)
        .order_by(func.max(sample.c.id).desc())
    ).all()
    read = sum(int(row.n) for row in grouped)
    if not grouped:
        return [], False
    newest = {
        row.id: row
        for row in session.execute(
            select(
                Action.id, Action.completed_at, func.substr(Action.error_message, 1, 500).label("message")
            ).where(Action.id.in_([row.newest for row in grouped]))
        )
    }
    names: dict[str, dict[str, int]] = {}
    for error_class, name, n in session.execute(
        select(sample.c.error_class, sample.c.name, func.count()).group_by(
            sample.c.error_class, sample.c.name
        )
    ):
        names.setdefault(error_class, {})[name] = int(n)
    groups = []
    for row in grouped:
        first = newest.get(row.newest)
        by_name = names.get(row.error_class, {})
        groups.append(
            ErrorGroup(
                error_class=row.error_class,
                count=int(row.n),
                newest_id=int(row.newest),
                newest_at=first.completed_at if first is not None else None,
                message=first.message if first is not None else None,
                names=tuple(sorted(by_name, key=lambda k: (-by_name[k], k))[:3]),
            )
        )
    return groups, read >= scan


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
