"""Given actions completed at several times, the overview draws throughput and failures over
time as a chart: stacked bars per minute for the last hour (per 5 minutes, hour or 6 hours
for longer windows), drawn on the server as inline SVG, with the same figures as a table.
The chart reads one window of completed_at and is reused for 30 s by every request, so its
polling never recomputes it per tick.

Not a spec case: the studio is ours (issue 4, "Overview": throughput and failures over time).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pytest
from sqlalchemy.orm import Session

import engine
from engine import clock, testing
from tests.domain import Car
from tests.studio.support import HTMX, StudioClient

NOW = datetime(2026, 1, 10, 12, 30, 20)


def order_paint(car: Car, *colors: str) -> None:
    """The paint shop is asked; it completes the action from outside."""


@pytest.fixture
def history(session: Session, car: Car) -> None:
    """A drive at 11:10 and a breakdown at 11:40; at 12:30, two drives, a breakdown and a
    paint job whose 5-second timeout ran out; and a paint job still performing."""
    engine.define(Car, "breakdown")
    engine.define(Car, "paint", order_paint, outbound=True, timeout=timedelta(seconds=5))
    testing.freeze(NOW - timedelta(minutes=80))
    engine.now(car, "drive", 1)
    testing.travel(timedelta(minutes=30))
    with testing.handle_exceptions():
        engine.now(car, "breakdown")
    testing.travel(timedelta(minutes=50) - timedelta(seconds=6))
    engine.now(car, "paint", "red")
    testing.travel(timedelta(seconds=6))
    testing.drain()  # the timeout
    engine.now(car, "drive", 2)
    engine.now(car, "drive", 3)
    with testing.handle_exceptions():
        engine.now(car, "breakdown")
    engine.now(car, "paint", "blue")
    assert clock.now() == NOW


def bars(html: str) -> list[tuple[str, int]]:
    return [
        (s, int(n))
        for s, n in re.findall(r'class="bar status-\w+"[^>]*data-status="(\w+)" data-count="(\d+)"', html)
    ]


def figure(html: str, name: str) -> int:
    found = re.search(rf'data-{name}="(\d+)"', html)
    assert found is not None, name
    return int(found.group(1))


def test_the_last_hour_is_drawn_per_minute_with_failures_apart(
    viewer_client: StudioClient, history: None
) -> None:
    page = viewer_client.get("/")

    assert page.status_code == 200
    # Sixty one-minute bars; the 11:10 drive is older than the window
    assert page.text.count('<g class="slot">') == 60
    assert figure(page.text, "completed") == 5
    assert figure(page.text, "succeeded") == 2
    assert figure(page.text, "failures") == 3  # a failure at 11:40 and 12:30, a timeout at 12:30
    assert "(60.0% of those that ran)" in page.text
    # The 12:30 bar stacks two succeeded, one failed, one timed out; the 11:40 one, one failed
    assert bars(page.text) == [("failed", 1), ("succeeded", 2), ("failed", 1), ("timed_out", 1)]
    assert "<title>12:30 to 12:31 UTC: 2 succeeded, 1 failed, 1 timed out</title>" in page.text
    assert "<title>11:40 to 11:41 UTC: 1 failed</title>" in page.text
    # An inline SVG, with a text alternative and the figures as a table
    assert '<svg class="bars" viewBox="0 0 600 120"' in page.text
    assert 'role="img" aria-labelledby="throughput-desc"' in page.text
    table = page.text.split('<details class="chart-table">')[1]
    assert re.search(
        r"<th scope=\"row\">12:30 to 12:31 UTC</th><td class=\"num\">2</td><td class=\"num\">1</td>", table
    )
    assert "<script" not in page.text.split('<section id="overview-throughput"')[1].split("</section>")[0]


def test_longer_windows_group_completions_by_longer_buckets(
    viewer_client: StudioClient, history: None
) -> None:
    day = viewer_client.get("/?window=24h")

    assert day.text.count('<g class="slot">') == 24
    assert figure(day.text, "completed") == 6  # the 11:10 drive too
    # The 11:00 hour: the drive and the failure; the 12:00 hour: the rest
    assert bars(day.text) == [
        ("succeeded", 1),
        ("failed", 1),
        ("succeeded", 2),
        ("failed", 1),
        ("timed_out", 1),
    ]
    assert "<title>11:00 to 12:00 UTC: 1 succeeded, 1 failed</title>" in day.text
    week = viewer_client.get("/?window=7d")
    assert week.text.count('<g class="slot">') == 28
    assert "01-10 12:00 to 01-10 18:00 UTC" in week.text
    six = viewer_client.get("/?window=6h")
    assert six.text.count('<g class="slot">') == 72
    # An unknown window is the last hour
    assert viewer_client.get("/?window=forever").text.count('<g class="slot">') == 60


def test_the_window_links_work_with_and_without_javascript(
    viewer_client: StudioClient, history: None
) -> None:
    page = viewer_client.get("/")

    link = re.search(
        r'<a href="/\?window=24h"\s+hx-get="/overview/throughput\?window=24h"'
        r'\s+hx-target="#overview-throughput"',
        page.text,
    )
    assert link is not None
    assert 'aria-current="true">1h</a>' in page.text
    fragment = viewer_client.get("/overview/throughput?window=24h", headers=HTMX)
    assert fragment.text.lstrip().startswith('<section id="overview-throughput"')
    assert "<html" not in fragment.text
    assert 'aria-current="true">24h</a>' in fragment.text


def test_the_chart_polls_while_the_tab_is_visible_and_is_reused_between_ticks(
    viewer_client: StudioClient, history: None, car: Car
) -> None:
    first = viewer_client.get("/overview/throughput", headers=HTMX)
    assert 'hx-get="/overview/throughput?window=1h"' in first.text
    assert "hx-trigger=\"every 30s, stepwise:visible\"" in first.text
    assert figure(first.text, "completed") == 5

    # When another drive completes, the next ticks within 30 s show the chart as it was
    engine.now(car, "drive", 4)
    testing.travel(timedelta(seconds=20))
    assert figure(viewer_client.get("/overview/throughput", headers=HTMX).text, "completed") == 5
    # And after 30 s it is computed again
    testing.travel(timedelta(seconds=11))
    assert figure(viewer_client.get("/overview/throughput", headers=HTMX).text, "completed") == 6


def test_an_empty_window_says_nothing_completed(viewer_client: StudioClient) -> None:
    page = viewer_client.get("/")

    assert figure(page.text, "completed") == 0
    assert bars(page.text) == []
    assert "Nothing completed in the last hour." in page.text


def test_the_older_bars_of_long_windows_are_reused_for_an_hour_and_say_so(
    viewer_client: StudioClient, car: Car
) -> None:
    # Given a breakdown two days ago, on the week's chart
    engine.define(Car, "breakdown")
    testing.freeze(NOW - timedelta(days=2))
    with testing.handle_exceptions():
        broken = engine.now(car, "breakdown")
    testing.travel(timedelta(days=2))
    week = viewer_client.get("/?window=7d").text
    assert figure(week, "failures") == 1
    assert "· updated 0ms ago, bars before the last 2: 0ms ago" in week

    # When it is retried (it fails again, now) and the week's 10 minutes of reuse are over
    assert engine.commands.retry(broken.id)
    with testing.handle_exceptions():
        testing.drain()
    testing.travel(timedelta(minutes=11))

    # Then the last two bars are read again, and the older ones are still those of 11
    # minutes ago (the breakdown counts in its old bar too), as the chart says
    week = viewer_client.get("/?window=7d").text
    assert figure(week, "failures") == 2
    assert "· updated 0ms ago, bars before the last 2: 11m 00s ago" in week
    assert "completions updated 0ms ago (the older ones 11m 00s ago)" in week
    # And after an hour every bar is read again
    testing.travel(timedelta(minutes=50))
    assert figure(viewer_client.get("/?window=7d").text, "failures") == 1
    # While the last hour's bars (a minute each) are read again as a whole
    assert "bars before the last" not in viewer_client.get("/").text
