"""Given runs of several definitions, the overview and the catalog show, per definition, the
runs that ended in the chosen window (1 h, 24 h, 7 d), their success rate and the median and
95th percentile of their duration, the same on SQLite (computed in Python) and PostgreSQL
(``percentile_cont``); the figures are reused for the window's time like the chart's.

Not a spec case: the studio is ours (issue 12, "Errors at a glance": runs per definition).
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from sqlalchemy.orm import Session

import engine
from app.overview import queries as queries_overview
from engine import clock, testing
from tests.domain import Car
from tests.studio.support import HTMX, StudioClient


def stats_on(html: str) -> dict[str, tuple[int, int, str, str]]:
    found = re.findall(
        r'<tr data-definition="([^"]+)" data-runs="(\d+)" data-ok="(\d+)">'
        r'.*?data-p50="([^"]*)".*?data-p95="([^"]*)"',
        html,
        re.S,
    )
    return {d: (int(runs), int(ok), p50, p95) for d, runs, ok, p50, p95 in found}


def given_drives_of_one_to_ten_seconds_and_two_breakdowns(car: Car) -> None:
    """Ten drives that took 1 s, 2 s … 10 s, and two breakdowns (failed at once)."""
    testing.freeze()

    def drive(car: Car, miles: int) -> None:
        testing.travel(timedelta(seconds=miles))

    engine.define(Car, "drive", drive)
    engine.define(Car, "breakdown")
    for miles in range(1, 11):
        engine.now(car, "drive", miles)
    with testing.handle_exceptions():
        engine.now(car, "breakdown")
        engine.now(car, "breakdown")


def test_runs_success_rate_and_percentiles_per_definition(session: Session, car: Car) -> None:
    given_drives_of_one_to_ten_seconds_and_two_breakdowns(car)

    stats, sample_full = queries_overview.definition_stats(session, clock.now() - timedelta(hours=1))

    by_name = {s.name: s for s in stats}
    assert [s.name for s in stats] == ["drive", "breakdown"]  # the most runs first
    drive = by_name["drive"]
    assert (drive.runs, drive.succeeded, drive.success_rate) == (10, 10, 1.0)
    assert drive.p50 == timedelta(seconds=5.5)
    assert drive.p95 is not None
    assert drive.p95.total_seconds() == pytest.approx(9.55)
    breakdown = by_name["breakdown"]
    assert (breakdown.runs, breakdown.succeeded, breakdown.success_rate) == (2, 0, 0.0)
    assert not sample_full


def test_the_overview_shows_them_for_the_chosen_window(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    given_drives_of_one_to_ten_seconds_and_two_breakdowns(car)
    testing.travel(timedelta(hours=2))
    engine.now(car, "honk")

    hour = stats_on(viewer_client.get("/").text)
    day = stats_on(viewer_client.get("/overview/runs?window=24h", headers=HTMX).text)

    assert hour == {"Car.honk": (1, 1, "0.0", "0.0")}
    assert day["Car.drive"] == (10, 10, "5.5", day["Car.drive"][3])
    assert float(day["Car.drive"][3]) == pytest.approx(9.55)
    assert day["Car.breakdown"][:2] == (2, 0)
    page = viewer_client.get("/?window=24h").text
    assert 'href="/catalog/Car/drive"' in page
    assert "0.0%" in page  # the breakdowns' success rate


def test_the_catalog_shows_them_per_definition(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    given_drives_of_one_to_ten_seconds_and_two_breakdowns(car)

    catalog = viewer_client.get("/catalog/")
    one = viewer_client.get("/catalog/Car/drive?window=7d")

    assert stats_on(catalog.text)["Car.breakdown"][:2] == (2, 0)
    assert set(stats_on(one.text)) == {"Car.drive"}
    assert "Runs in the last 7 days" in one.text
    assert stats_on(one.text)["Car.drive"][:3] == (10, 10, "5.5")


def test_the_percentiles_match_postgresql_percentile_cont() -> None:
    values = sorted([1.0, 2.0, 3.0, 4.0, 10.0])

    assert queries_overview.percentile(values, 0.5) == 3.0
    assert queries_overview.percentile(values, 0.95) == pytest.approx(8.8)
    assert queries_overview.percentile([4.0], 0.95) == 4.0
    assert queries_overview.percentile([], 0.5) is None
