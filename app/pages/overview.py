"""Overview: counts by status, throughput and failures over time (an inline SVG chart), the
oldest pending action per lane, and the actions that look stuck.

The counts are capped (``app.queries``) and computed per request. The other figures read
more, so each is computed at most once per ``TTL`` in this process and shared by every
request and every polling tab (the fragments poll only while the tab is visible).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from flask import Blueprint, current_app, request
from werkzeug.wrappers import Response

from engine import clock, status

from .. import queries
from .. import queries_actions as q
from ..database import db
from ..views import render

bp = Blueprint("overview", __name__)

T = TypeVar("T")

#: How long each figure is reused before it is computed again (the chart's: per window).
TTL = {
    "waiting": timedelta(seconds=15),
    "stuck": timedelta(seconds=15),
    # The usual duration of an action name moves slowly.
    "usual": timedelta(minutes=5),
}

#: Statuses drawn in the chart, bottom to top (every completion: pending and performing
#: actions have no completed_at).
CHART_STATUSES = (status.SUCCEEDED, status.FAILED, status.TIMED_OUT, status.CANCELLED, status.SUPERSEDED)
FAILURES = (status.FAILED, status.TIMED_OUT)


@dataclass(frozen=True)
class Window:
    key: str
    label: str
    buckets: int
    seconds: int
    per: str
    #: How long its figures are reused, and how often the chart polls: a week of 6-hour
    #: bars reads far more rows than an hour and moves far less.
    ttl: timedelta = timedelta(seconds=30)
    poll: str = "30s"

    @property
    def span(self) -> timedelta:
        return timedelta(seconds=self.buckets * self.seconds)


WINDOWS = {
    w.key: w
    for w in (
        Window("1h", "Last hour", 60, 60, "minute"),
        Window("6h", "Last 6 hours", 72, 300, "5 minutes", timedelta(minutes=1), "60s"),
        Window("24h", "Last 24 hours", 24, 3600, "hour", timedelta(minutes=2), "60s"),
        Window("7d", "Last 7 days", 28, 6 * 3600, "6 hours", timedelta(minutes=10), "60s"),
    )
}
DEFAULT_WINDOW = "1h"


# --- an in-process cache per app ----------------------------------------------------------------


class Cache:
    """Values computed at most once per time-to-live, by the engine's clock (tests move it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[Hashable, tuple[datetime, Any]] = {}

    def get(self, key: Hashable, ttl: timedelta, compute: Callable[[], T]) -> tuple[T, datetime]:
        """The value and when it was computed."""
        now = clock.now()
        with self._lock:
            hit = self._items.get(key)
        if hit is not None and hit[0] <= now < hit[0] + ttl:
            return hit[1], hit[0]
        value = compute()
        with self._lock:
            self._items[key] = (now, value)
        return value, now

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


def cache() -> Cache:
    found = current_app.extensions.get("stepwise_overview_cache")
    if found is None:
        found = current_app.extensions.setdefault("stepwise_overview_cache", Cache())
    assert isinstance(found, Cache)
    return found


# --- views -------------------------------------------------------------------------------------------


@bp.get("/")
def index() -> Response:
    return render(
        "overview/index.html",
        "overview/_counts.html",
        **counts(),
        **chart_context(),
        **waiting_context(),
        **stuck_context(),
        scan=q.SCAN,
    )


@bp.get("/overview/counts")
def counts_fragment() -> Response:
    """The counts alone: the fragment polls this while the tab is visible."""
    return render("overview/_counts.html", **counts())


@bp.get("/overview/throughput")
def throughput_fragment() -> Response:
    """The chart alone (its window links and its polling ask for it)."""
    return render("overview/_throughput.html", **chart_context())


@bp.get("/overview/waiting")
def waiting_fragment() -> Response:
    return render("overview/_waiting.html", **waiting_context(), scan=q.SCAN)


@bp.get("/overview/stuck")
def stuck_fragment() -> Response:
    return render("overview/_stuck.html", **stuck_context(), scan=q.SCAN)


def counts() -> dict[str, Any]:
    session: Any = db.session
    return {
        "counts": queries.status_counts(session),
        "lanes": queries.lane_count(session),
        "achievements": queries.achievement_count(session),
    }


# --- the chart -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Segment:
    status: str
    count: int
    y: float
    height: float


@dataclass(frozen=True)
class Bar:
    x: float
    bucket: q.Bucket
    segments: list[Segment]
    #: "12:05 to 12:06 UTC", and the bar's tooltip: the span and its counts.
    span: str
    title: str


@dataclass(frozen=True)
class Chart:
    window: Window
    buckets: list[q.Bucket]
    bars: list[Bar]
    peak: int
    totals: dict[str, int]
    computed_at: datetime
    #: Labels under the chart: its start, its middle and its end.
    axis: tuple[str, str, str] = ("", "", "")
    width: int = 0
    height: int = 0
    statuses: tuple[str, ...] = field(default=CHART_STATUSES)

    @property
    def total(self) -> int:
        return sum(self.totals.values())

    @property
    def failures(self) -> int:
        return sum(self.totals.get(s, 0) for s in FAILURES)

    @property
    def failure_rate(self) -> float | None:
        """Failed or timed out among the completions that ran to an end (not cancelled or
        superseded), as a fraction."""
        ran = self.totals.get(status.SUCCEEDED, 0) + self.failures
        return self.failures / ran if ran else None

    @property
    def busy(self) -> list[Bar]:
        """The bars of buckets with completions, newest first (the chart as a table)."""
        return [bar for bar in reversed(self.bars) if bar.bucket.total]


#: The chart's drawing box: one slot per bucket.
SLOT = 10
BAR = 8
HEIGHT = 120


def time_label(value: datetime, window: Window) -> str:
    return value.strftime("%m-%d %H:%M" if window.seconds >= 3600 * 6 else "%H:%M")


def draw(window: Window, buckets: list[q.Bucket], computed_at: datetime) -> Chart:
    peak = max((b.total for b in buckets), default=0)
    scale = HEIGHT / peak if peak else 0.0
    bars = []
    for i, bucket in enumerate(buckets):
        segments = []
        top = float(HEIGHT)
        for state in CHART_STATUSES:
            n = bucket.counts.get(state, 0)
            if n:
                h = max(n * scale, 1.0)
                top -= h
                segments.append(Segment(state, n, round(top, 2), round(h, 2)))
        span = f"{time_label(bucket.start, window)} to {time_label(bucket.end, window)} UTC"
        described = ", ".join(f"{s.count} {s.status.replace('_', ' ')}" for s in segments)
        described = described or "nothing completed"
        bars.append(Bar(i * SLOT + (SLOT - BAR) / 2, bucket, segments, span, f"{span}: {described}"))
    totals: dict[str, int] = {}
    for bucket in buckets:
        for state, n in bucket.counts.items():
            totals[state] = totals.get(state, 0) + n
    axis = (
        (
            time_label(buckets[0].start, window),
            time_label(buckets[len(buckets) // 2].start, window),
            time_label(buckets[-1].end, window),
        )
        if buckets
        else ("", "", "")
    )
    return Chart(window, buckets, bars, peak, totals, computed_at, axis, len(buckets) * SLOT, HEIGHT)


def chart_window() -> Window:
    return WINDOWS.get(request.args.get("window", ""), WINDOWS[DEFAULT_WINDOW])


def chart_context() -> dict[str, Any]:
    window = chart_window()

    def compute() -> list[q.Bucket]:
        session: Any = db.session
        return q.throughput(session, clock.now(), window.buckets, window.seconds)

    buckets, at = cache().get(("chart", window.key), window.ttl, compute)
    return {"chart": draw(window, buckets, at), "windows": WINDOWS.values()}


# --- oldest pending per lane, stuck actions --------------------------------------------------------


def waiting_context() -> dict[str, Any]:
    def compute() -> tuple[list[q.LaneWait], bool]:
        session: Any = db.session
        return q.oldest_pending_by_lane(session)

    (waits, sample_full), at = cache().get(("waiting",), TTL["waiting"], compute)
    return {"waits": waits, "waits_sample_full": sample_full, "waits_at": at, "waits_top": q.TOP}


def stuck_settings() -> dict[str, Any]:
    config = current_app.config
    return {
        "factor": float(config.get("STEPWISE_STUCK_FACTOR", 3)),
        "floor": timedelta(seconds=float(config.get("STEPWISE_STUCK_FLOOR_SECONDS", 60))),
        "outbound_after": timedelta(minutes=float(config.get("STEPWISE_STUCK_OUTBOUND_MINUTES", 30))),
    }


def stuck_context() -> dict[str, Any]:
    settings = stuck_settings()
    store = cache()

    def usual(session: Any, name: str) -> timedelta | None:
        value, _ = store.get(("usual", name), TTL["usual"], lambda: q.usual_duration(session, name))
        return value

    def compute() -> tuple[list[q.Stuck], bool]:
        session: Any = db.session
        performing = q.performing_sample(session)
        names = {a.name for a in performing if not a.outbound}
        durations = {name: usual(session, name) for name in sorted(names)}
        found = q.stuck_actions(performing, durations, clock.now(), **settings)
        return found, len(performing) >= q.SCAN

    (found, sample_full), at = store.get(("stuck",), TTL["stuck"], compute)
    return {
        "stuck": found[: q.TOP],
        "stuck_total": len(found),
        "stuck_sample_full": sample_full,
        "stuck_at": at,
        "stuck_settings": settings,
    }
