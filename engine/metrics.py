"""Metrics: the engine's state as a Prometheus text exposition (format 0.0.4).

Every figure is one read-only aggregate over indexed columns of the database, so any number
of worker processes report the same numbers, and a scrape never writes nor locks a row.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Float, Select, case, cast, desc, extract, func, select
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from . import clock, history, status
from .action import Action
from .history import ActionEvent
from .invocation import Invocation
from .performance import Performance

#: The Content-Type a /metrics endpoint answers with.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: Histograms cover the actions completed (durations) or started (queue latency) this recently.
WINDOW = timedelta(hours=1)
#: At most this many lanes get their own backlog series; the rest are summed under OTHER_LANES.
LANE_LIMIT = 100
OTHER_LANES = "(other)"

DURATION_BUCKETS: tuple[float, ...] = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 21600, 86400)
LATENCY_BUCKETS: tuple[float, ...] = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600)

RETRY_EVENT = "attempt_failed"
RECOVERY_EVENT = "recovered"


def render(
    session: Session,
    *,
    window: timedelta = WINDOW,
    lane_limit: int = LANE_LIMIT,
    duration_buckets: Sequence[float] = DURATION_BUCKETS,
    latency_buckets: Sequence[float] = LATENCY_BUCKETS,
) -> str:
    """The exposition, computed from the database in ``session`` (which is only read)."""
    now = clock.now()
    recent = Window(now - window, now)
    out = Exposition()
    _actions(session, out)
    _backlog(session, out, lane_limit)
    _durations(session, out, recent, _bounds(duration_buckets))
    _latency(session, out, recent, _bounds(latency_buckets))
    _events(session, out)
    return out.text()


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
        return _number((self.end - self.start).total_seconds())


# --- the figures ----------------------------------------------------------------------------


def _actions(session: Session, out: Exposition) -> None:
    # An index-only scan of ix_stepwise_actions_status_name.
    rows = session.execute(
        select(Action.status, Action.name, func.count()).group_by(Action.status, Action.name)
    ).all()
    counts = {(row[0], row[1]): int(row[2]) for row in rows}
    # Every known status of every name seen, zeros included, so a series exists before its
    # first action and alerts such as `stepwise_actions{status="failed"} > 0` can be written.
    statuses = list(status.ACTION_STATUSES) + sorted({s for s, _ in counts} - set(status.ACTION_STATUSES))
    out.family("stepwise_actions", "gauge", "Actions by status and by name.")
    for name in sorted({n for _, n in counts}):
        for state in statuses:
            out.sample("stepwise_actions", counts.get((state, name), 0), status=state, name=name)


def _backlog(session: Session, out: Exposition, lane_limit: int) -> None:
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
    out.family(
        "stepwise_lane_backlog",
        "gauge",
        f"Pending actions per lane (concurrency key); beyond the {lane_limit} longest, "
        f'the rest are summed under concurrency_key="{OTHER_LANES}".',
    )
    for key, count, _ in top[:lane_limit]:
        out.sample("stepwise_lane_backlog", int(count), concurrency_key=key)
    if len(top) > lane_limit:
        shown = sum(int(count) for _, count, _ in top[:lane_limit])
        out.sample("stepwise_lane_backlog", int(top[0].total) - shown, concurrency_key=OTHER_LANES)
    lanes = session.scalar(select(func.count()).select_from(Performance)) or 0
    out.family("stepwise_lanes", "gauge", "Lanes (concurrency keys) with a current action.")
    out.sample("stepwise_lanes", lanes)


def _durations(session: Session, out: Exposition, window: Window, buckets: list[float]) -> None:
    # Actions that never started (superseded, cancelled while queued) have no duration.
    seconds = _seconds_between(session, Action.started_at, Action.completed_at)
    rows = select(_unordered(Action.name).label("name"), seconds.label("seconds")).where(
        Action.completed_at.between(window.start, window.end), Action.started_at.is_not(None)
    )
    out.family(
        "stepwise_action_duration_seconds",
        "histogram",
        f"Time from start to completion of the actions completed in the last {window.seconds} s, by name.",
    )
    _histogram(session, out, "stepwise_action_duration_seconds", rows, buckets)


def _latency(session: Session, out: Exposition, window: Window, buckets: list[float]) -> None:
    # One sample per admitted invocation. An invocation whose action was superseded now
    # points at the action that replaced it: its wait lasts until that one starts.
    seconds = _seconds_between(session, Invocation.created_at, Action.started_at)
    rows = (
        select(_unordered(Action.name).label("name"), seconds.label("seconds"))
        .join(Invocation, Invocation.action_id == Action.id)
        .where(Action.started_at.between(window.start, window.end), Invocation.outcome == "admitted")
    )
    out.family(
        "stepwise_queue_latency_seconds",
        "histogram",
        f"Time from enqueue (the invocation) to start of the actions started in the last "
        f"{window.seconds} s, by name.",
    )
    _histogram(session, out, "stepwise_queue_latency_seconds", rows, buckets)


def _events(session: Session, out: Exposition) -> None:
    # An index-only scan of ix_stepwise_action_events_event, over these two events only.
    rows = session.execute(
        select(ActionEvent.event, ActionEvent.cause, func.count())
        .where(ActionEvent.event.in_((RETRY_EVENT, RECOVERY_EVENT)))
        .group_by(ActionEvent.event, ActionEvent.cause)
    ).all()
    retries = sum(int(n) for event, _, n in rows if event == RETRY_EVENT)
    recoveries = sum(
        int(n) for event, cause, n in rows if event == RECOVERY_EVENT and cause == history.SWEEPER
    )
    out.family("stepwise_retries_total", "counter", "Failed attempts of step bodies that were retried.")
    out.sample("stepwise_retries_total", retries)
    out.family(
        "stepwise_sweeper_recoveries_total",
        "counter",
        "Work that was due but not picked up, which the sweeper sent again.",
    )
    out.sample("stepwise_sweeper_recoveries_total", recoveries)


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
    session: Session, out: Exposition, metric: str, rows: Select[str, float], buckets: list[float]
) -> None:
    """One histogram per name, its buckets counted in the database with SUM(CASE …)."""
    sample = rows.subquery()
    columns: list[Any] = [sample.c.name, func.count(), func.coalesce(func.sum(sample.c.seconds), 0.0)]
    columns += [func.sum(case((sample.c.seconds <= bound, 1), else_=0)) for bound in buckets]
    result = session.execute(select(*columns).group_by(sample.c.name).order_by(sample.c.name)).all()
    for name, count, total, *cumulative in result:
        for bound, n in zip(buckets, cumulative, strict=True):
            out.sample(f"{metric}_bucket", int(n or 0), name=name, le=_number(bound))
        out.sample(f"{metric}_bucket", int(count), name=name, le="+Inf")
        out.sample(f"{metric}_sum", float(total), name=name)
        out.sample(f"{metric}_count", int(count), name=name)


# --- the text format ------------------------------------------------------------------------


class Exposition:
    """Lines of the text format: each family's HELP and TYPE, then its samples."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str) -> None:
        escaped = help_text.replace("\\", "\\\\").replace("\n", "\\n")
        self.lines += [f"# HELP {name} {escaped}", f"# TYPE {name} {kind}"]

    def sample(self, name: str, value: float, /, **labels: str) -> None:
        if labels:
            pairs = ",".join(f'{key}="{_escape_label(text)}"' for key, text in labels.items())
            self.lines.append(f"{name}{{{pairs}}} {_number(value)}")
        else:
            self.lines.append(f"{name} {_number(value)}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))
