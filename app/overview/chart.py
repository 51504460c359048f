"""The overview's chart of throughput and failures: its time windows, and the stacked bars
drawn from the completions per bucket (``queries.throughput``) as inline SVG.

Pure drawing: it reads nothing, so a chart is the same for every tab that shares its buckets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from engine import status

from .queries import Bucket

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
    bucket: Bucket
    segments: list[Segment]
    #: "12:05 to 12:06 UTC", and the bar's tooltip: the span and its counts.
    span: str
    title: str


@dataclass(frozen=True)
class Chart:
    window: Window
    buckets: list[Bucket]
    bars: list[Bar]
    peak: int
    totals: dict[str, int]
    computed_at: datetime
    #: Labels under the chart: its start, its middle and its end.
    axis: tuple[str, str, str] = ("", "", "")
    width: int = 0
    height: int = 0
    statuses: tuple[str, ...] = field(default=CHART_STATUSES)
    #: When the bars before the last ``recent_bars`` were read, if they were read apart
    #: (the older bars of a long window are reused for longer: app/overview/views.py).
    older_at: datetime | None = None
    recent_bars: int = 0

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


def draw(window: Window, buckets: list[Bucket], computed_at: datetime) -> Chart:
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
