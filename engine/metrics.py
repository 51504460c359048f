"""Metrics: the engine's state as a Prometheus text exposition (format 0.0.4), written by
``prometheus_client`` from a collector that reads the database.

The gauges and histograms are read-only aggregates over indexed columns, so any number of
worker processes report the same numbers, and a scrape never writes nor locks a row. The
counters are monotonic: they are added to where what they count happens
(``engine.counter``), never recomputed from the history, which may be pruned.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from sqlalchemy import Float, Select, case, cast, desc, extract, func, select
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from . import clock, counter, status
from .action import Action
from .attempt import Attempt
from .invocation import Invocation
from .performance import Performance
from .schedules.tables import FIRED, Schedule, Tick
from .signal import SIGNAL_WAIT, Signal

#: The Content-Type a /metrics endpoint answers with (the text format 0.0.4).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: Histograms cover the actions completed (durations) or started (queue latency) this recently.
WINDOW = timedelta(hours=1)
#: At most this many lanes get their own backlog series; the rest are summed under OTHER_LANES.
LANE_LIMIT = 100
OTHER_LANES = "(other)"

DURATION_BUCKETS: tuple[float, ...] = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 21600, 86400)
LATENCY_BUCKETS: tuple[float, ...] = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600)
SCHEDULE_LAG_BUCKETS: tuple[float, ...] = (0.1, 0.5, 1, 2, 5, 10, 30, 60, 300, 900, 3600)

#: Adding to a counter in the caller's transaction (what history events do not count already):
#: ``metrics.count(session, {name: n})``, or ``metrics.count_by(session, name, label, {value: n})``.
count = counter.count
count_by = counter.count_by


def render(
    session: Session,
    *,
    window: timedelta = WINDOW,
    lane_limit: int = LANE_LIMIT,
    duration_buckets: Sequence[float] = DURATION_BUCKETS,
    latency_buckets: Sequence[float] = LATENCY_BUCKETS,
) -> str:
    """The exposition, computed from the database in ``session`` (which is only read)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(
        DatabaseCollector(
            session,
            window=window,
            lane_limit=lane_limit,
            duration_buckets=duration_buckets,
            latency_buckets=latency_buckets,
        )
    )
    return generate_latest(registry).decode()


def _bounds(buckets: Sequence[float]) -> list[float]:
    """Finite upper bounds, each once, in increasing order (``+Inf`` is always added)."""
    return sorted({float(bound) for bound in buckets if math.isfinite(bound)})


@dataclass(frozen=True)
class Window:
    """The recent stretch of time the histograms cover."""

    start: datetime
    end: datetime

    @property
    def seconds(self) -> str:
        seconds = (self.end - self.start).total_seconds()
        return str(int(seconds)) if seconds.is_integer() else str(seconds)


class DatabaseCollector(Collector):
    """The engine's metric families, read from the database at each ``collect()``."""

    def __init__(
        self,
        session: Session,
        *,
        window: timedelta = WINDOW,
        lane_limit: int = LANE_LIMIT,
        duration_buckets: Sequence[float] = DURATION_BUCKETS,
        latency_buckets: Sequence[float] = LATENCY_BUCKETS,
    ) -> None:
        self.session = session
        self.window = window
        self.lane_limit = lane_limit
        self.duration_buckets = _bounds(duration_buckets)
        self.latency_buckets = _bounds(latency_buckets)

    def collect(self) -> Iterator[Metric]:
        now = clock.now()
        recent = Window(now - self.window, now)
        yield _actions(self.session)
        yield from _backlog(self.session, self.lane_limit)
        yield _durations(self.session, recent, self.duration_buckets)
        yield _latency(self.session, recent, self.latency_buckets)
        yield _attempt_latency(self.session, recent, self.latency_buckets)
        yield from _waits(self.session, now)
        yield from _schedules(self.session, now, recent)
        yield from _counters(self.session)


# --- the figures ----------------------------------------------------------------------------


def _actions(session: Session) -> Metric:
    # An index-only scan of ix_stepwise_actions_status_name.
    rows = session.execute(
        select(Action.status, Action.name, func.count()).group_by(Action.status, Action.name)
    ).all()
    counts = {(row[0], row[1]): int(row[2]) for row in rows}
    # Every known status of every name seen, zeros included, so a series exists before its
    # first action and alerts such as `stepwise_actions{status="failed"} > 0` can be written.
    statuses = list(status.ACTION_STATUSES) + sorted({s for s, _ in counts} - set(status.ACTION_STATUSES))
    family = GaugeMetricFamily(
        "stepwise_actions", "Actions by status and by name.", labels=["status", "name"]
    )
    for name in sorted({n for _, n in counts}):
        for state in statuses:
            family.add_metric([state, name], counts.get((state, name), 0))
    return family


def _backlog(session: Session, lane_limit: int) -> Iterator[Metric]:
    # Pending rows only, through ix_stepwise_actions_status: the cost grows with the backlog.
    # The total over all lanes comes from the same statement (a window over the groups, taken
    # before LIMIT), so "(other)" is consistent with the lanes shown.
    backlog = func.count().label("backlog")
    top = session.execute(
        select(Action.concurrency_key, backlog, func.sum(func.count()).over().label("total"))
        .where(Action.status == status.PENDING)
        .group_by(Action.concurrency_key)
        .order_by(desc(backlog), Action.concurrency_key)
        .limit(lane_limit + 1)
    ).all()
    family = GaugeMetricFamily(
        "stepwise_lane_backlog",
        f"Pending actions per lane (concurrency key); beyond the {lane_limit} longest, "
        f'the rest are summed under concurrency_key="{OTHER_LANES}".',
        labels=["concurrency_key"],
    )
    for key, n, _ in top[:lane_limit]:
        family.add_metric([key], int(n))
    if len(top) > lane_limit:
        shown = sum(int(n) for _, n, _ in top[:lane_limit])
        family.add_metric([OTHER_LANES], int(top[0].total) - shown)
    yield family
    lanes = session.scalar(select(func.count()).select_from(Performance)) or 0
    yield GaugeMetricFamily("stepwise_lanes", "Lanes (concurrency keys) with a current action.", value=lanes)


def _waits(session: Session, now: datetime) -> Iterator[Metric]:
    # Through the partial indexes of open waits and of unconsumed signals.
    waits = session.execute(
        select(func.count(), func.min(Invocation.created_at)).where(
            Invocation.kind == "wait", Invocation.name == SIGNAL_WAIT, Invocation.concluded_at.is_(None)
        )
    ).one()
    yield GaugeMetricFamily(
        "stepwise_signal_waits", "Steps' waits for signals not yet satisfied.", value=int(waits[0])
    )
    oldest = (now - waits[1]).total_seconds() if waits[1] is not None else 0.0
    yield GaugeMetricFamily(
        "stepwise_oldest_signal_wait_seconds",
        "How long the oldest open wait for a signal has waited.",
        value=oldest,
    )
    pending = (
        session.scalar(select(func.count()).select_from(Signal).where(Signal.consumed_at.is_(None))) or 0
    )
    yield GaugeMetricFamily(
        "stepwise_signals_pending", "Signals in inboxes that no step has consumed (yet).", value=int(pending)
    )


def _durations(session: Session, window: Window, buckets: list[float]) -> Metric:
    # Actions that never started (superseded, cancelled while queued) have no duration.
    seconds = _seconds_between(session, Action.started_at, Action.completed_at)
    rows = select(_unordered(Action.name).label("name"), seconds.label("seconds")).where(
        Action.completed_at.between(window.start, window.end), Action.started_at.is_not(None)
    )
    family = HistogramMetricFamily(
        "stepwise_action_duration_seconds",
        f"Time from start to completion of the actions completed in the last {window.seconds} s, by name.",
        labels=["name"],
    )
    _histogram(session, family, rows, buckets)
    return family


def _latency(session: Session, window: Window, buckets: list[float]) -> Metric:
    # One sample per admitted invocation. An invocation whose action was superseded now
    # points at the action that replaced it: its wait lasts until that one starts.
    seconds = _seconds_between(session, Invocation.created_at, Action.started_at)
    rows = (
        select(_unordered(Action.name).label("name"), seconds.label("seconds"))
        .join(Invocation, Invocation.action_id == Action.id)
        .where(Action.started_at.between(window.start, window.end), Invocation.outcome == "admitted")
    )
    family = HistogramMetricFamily(
        "stepwise_queue_latency_seconds",
        f"Time from enqueue (the invocation) to start of the actions started in the last "
        f"{window.seconds} s, by name.",
        labels=["name"],
    )
    _histogram(session, family, rows, buckets)
    return family


def _attempt_latency(session: Session, window: Window, buckets: list[float]) -> Metric:
    # Durable attempts only (their start is recorded): from due (the step opened, or its
    # retry's time) to start, through ix_stepwise_attempts_started_at. A metric, not a timeout.
    seconds = _seconds_between(session, Attempt.enqueued_at, Attempt.started_at)
    rows = (
        select(_unordered(Action.name).label("name"), seconds.label("seconds"))
        .join(Action, Action.id == Attempt.action_id)
        .where(Attempt.started_at.between(window.start, window.end), Attempt.enqueued_at.is_not(None))
    )
    family = HistogramMetricFamily(
        "stepwise_attempt_queue_latency_seconds",
        f"Time from due to start of the durable step attempts (heartbeat_timeout, attempt_timeout, "
        f"recover) started in the last {window.seconds} s, by action name.",
        labels=["name"],
    )
    _histogram(session, family, rows, buckets)
    return family


def _counters(session: Session) -> Iterator[Metric]:
    # One primary-key scan of a table with a row per counter (and label set).
    values = counter.totals(session)
    for name, help_text in counter.COUNTERS.items():
        found = values.get(name, [])
        names = sorted({key for labels, _ in found for key in labels})
        family = CounterMetricFamily(name, help_text, labels=names)
        for labels, value in found or [({}, 0)]:
            family.add_metric([labels.get(key, "") for key in names], value)
        yield family


def _seconds_between(session: Session, start: Any, end: Any) -> ColumnElement[float]:
    """``end - start`` in seconds, in SQL."""
    if session.get_bind().dialect.name == "sqlite":
        # SQLite keeps times as whole milliseconds; julianday() returns them as a float of
        # days, and rounding the difference to milliseconds removes the float's error.
        return cast(func.round((func.julianday(end) - func.julianday(start)) * 86400.0, 3), Float)
    return cast(extract("epoch", end - start), Float)


def _unordered(name: Any) -> ColumnElement[str]:
    """``name`` as an expression that no index matches. SQLite's planner has no statistics:
    grouping by the bare column, it reads all of ix_stepwise_actions_name to skip a sort
    instead of the recent range of ix_stepwise_actions_started_at or _completed_at."""
    return func.coalesce(name, "")


def _histogram(
    session: Session, family: HistogramMetricFamily, rows: Select[str, float], buckets: list[float]
) -> None:
    """One histogram per name, its buckets counted in the database with SUM(CASE …)."""
    sample = rows.subquery()
    columns: list[Any] = [sample.c.name, func.count(), func.coalesce(func.sum(sample.c.seconds), 0.0)]
    columns += [func.sum(case((sample.c.seconds <= bound, 1), else_=0)) for bound in buckets]
    result = session.execute(select(*columns).group_by(sample.c.name).order_by(sample.c.name)).all()
    for name, n, total, *cumulative in result:
        counts = [(_bound(bound), int(c or 0)) for bound, c in zip(buckets, cumulative, strict=True)]
        family.add_metric([name], [*counts, ("+Inf", int(n))], float(total))


def _bound(value: float) -> str:
    """An ``le`` label as Prometheus' own clients write it (``0.5``, ``10.0``)."""
    return repr(float(value))


def _schedules(session: Session, now: datetime, window: Window) -> Iterator[Metric]:
    # The active schedules' next ticks through ix_stepwise_schedules_due; the recent ticks
    # through ix_stepwise_schedule_ticks_fired_at.
    states = dict(
        session.execute(
            select(Schedule.paused_at.is_(None), func.count()).group_by(Schedule.paused_at.is_(None))
        ).all()
    )
    family = GaugeMetricFamily("stepwise_schedules", "Schedules, active or paused.", labels=["state"])
    family.add_metric(["active"], int(states.get(True, 0)))
    family.add_metric(["paused"], int(states.get(False, 0)))
    yield family
    oldest = session.scalar(
        select(func.min(Schedule.next_fire_at)).where(
            Schedule.paused_at.is_(None), Schedule.next_fire_at <= now
        )
    )
    yield GaugeMetricFamily(
        "stepwise_schedule_overdue_seconds",
        "How long the most overdue active schedule's tick has waited for a clock (0: none is due; "
        "it grows while no clock process runs).",
        value=(now - oldest).total_seconds() if oldest is not None else 0.0,
    )
    rows = (
        select(_unordered(Schedule.name).label("name"), Tick.lag_seconds.label("seconds"))
        .join(Schedule, Schedule.id == Tick.schedule_id)
        .where(Tick.fired_at.between(window.start, window.end), Tick.outcome == FIRED, Tick.manual.is_(False))
    )
    lag = HistogramMetricFamily(
        "stepwise_schedule_lag_seconds",
        f"Time from a tick's due time to when a clock fired it, for the ticks fired in the last "
        f"{window.seconds} s, by schedule.",
        labels=["schedule"],
    )
    _histogram(session, lag, rows, _bounds(SCHEDULE_LAG_BUCKETS))
    yield lag
