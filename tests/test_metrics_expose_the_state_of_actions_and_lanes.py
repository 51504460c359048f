"""Given action trees in the database, when the metrics are rendered, then the Prometheus
text exposition (written by prometheus_client) shows their state exactly: every family even
on an empty database, actions by status and name, the lane backlog (its keys capped),
durations and queue latency as histograms by name, and label values escaped.

Not a spec case: Stepped has no metrics (issue 3, section 5). The exposition is read by the
strict parser of tests/metrics_exposition.py.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import metrics, testing
from engine.models import Action
from tests.domain import Car
from tests.metrics_exposition import FAMILIES, define_paint, expected_buckets, scrape


def test_an_empty_database_exposes_every_family_with_zero_counters(session: Session) -> None:
    # When
    result = scrape()

    # Then
    assert {name: family.type for name, family in result.families.items()} == FAMILIES
    assert all(family.help for family in result.families.values())
    assert result.value("stepwise_retries_total") == 0
    assert result.value("stepwise_sweeper_recoveries_total") == 0
    assert result.value("stepwise_lanes") == 0
    assert result.series("stepwise_actions") == {}
    assert metrics.CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"


def test_actions_are_counted_by_status_and_by_name(session: Session, car: Car) -> None:
    """Given a finished three-action tree, a failed action and a lane holding a performing,
    a pending and a superseded paint job, each (status, name) is counted, and every other
    known status of those names is present with 0."""
    # Given
    visit = engine.define(Car, "visit")

    @visit.step
    def go(car: Car, step: engine.StepContext) -> None:
        step.do("honk")
        step.do("drive", 5)

    define_paint()
    engine.now(car, "visit")
    testing.drain()
    engine.now(car, "paint", "red")  # performing: the lane's current action
    engine.now(car, "paint", "blue")  # queued, then superseded by green
    engine.now(car, "paint", "green")
    with testing.handle_exceptions():
        assert engine.now(car, "breakdown").status == "failed"

    # When
    result = scrape()

    # Then
    series = {
        (dict(labels)["status"], dict(labels)["name"]): n
        for labels, n in result.series("stepwise_actions").items()
    }
    counted = {key: n for key, n in series.items() if n}
    assert counted == {
        ("succeeded", "visit"): 1,
        ("succeeded", "honk"): 1,
        ("succeeded", "drive"): 1,
        ("performing", "paint"): 1,
        ("pending", "paint"): 1,
        ("superseded", "paint"): 1,
        ("failed", "breakdown"): 1,
    }
    assert len(series) == 5 * len(engine.status.ACTION_STATUSES)
    assert series["cancelled", "visit"] == 0
    assert result.value("stepwise_lanes") == 1


def test_the_lane_backlog_counts_pending_actions_per_key_and_caps_the_keys(
    session: Session, car: Car
) -> None:
    """Given four lanes (keys named by the second argument), three of them with a queued
    action behind the performing one, the backlog is 1 in each of those three; capped to
    two keys, the longest (ties by key) are kept and the third is summed under "(other)"."""
    # Given
    define_paint(concurrency_key=lambda car, color, garage: garage)
    odd = 'w"e\\st\n'
    for garage in ("north", "south", odd, "east"):
        engine.now(car, "paint", "red", garage)
    for garage in ("north", "south", odd):
        assert engine.now(car, "paint", "blue", garage).status == "pending"

    # When
    uncapped, capped = scrape(), scrape(lane_limit=2)

    # Then
    backlog = {frozenset({("concurrency_key", key)}): 1.0 for key in ("north", "south", odd)}
    assert uncapped.series("stepwise_lane_backlog") == backlog
    assert capped.series("stepwise_lane_backlog") == {
        frozenset({("concurrency_key", "north")}): 1.0,
        frozenset({("concurrency_key", "south")}): 1.0,
        frozenset({("concurrency_key", "(other)")}): 1.0,
    }
    assert uncapped.value("stepwise_lanes") == capped.value("stepwise_lanes") == 4


def test_durations_form_a_histogram_by_name_over_the_recent_window(session: Session, car: Car) -> None:
    """Given paint jobs that took 10 s (two hours ago), 3 s and 45 s, and a drive that took
    no time (the clock is frozen), the last hour's histogram holds the 3 s and 45 s paint
    jobs and the drive; a three-hour window also holds the 10 s one."""
    # Given
    define_paint()
    testing.freeze(testing.travel(timedelta()))
    for color, seconds in (("old", 10), ("red", 3), ("blue", 45)):
        engine.now(car, "paint", color)
        testing.travel(timedelta(seconds=seconds))
        assert engine.complete(car, "paint", "succeeded")
        if color == "old":
            testing.travel(timedelta(hours=2))
    engine.now(car, "drive", 1)

    # When
    last_hour, last_three_hours = scrape(), scrape(window=timedelta(hours=3))

    # Then
    metric = "stepwise_action_duration_seconds"
    assert last_hour.buckets(metric, "paint") == expected_buckets(metrics.DURATION_BUCKETS, [3, 45])
    assert last_hour.value(f"{metric}_count", name="paint") == 2
    assert last_hour.value(f"{metric}_sum", name="paint") == 48
    assert last_hour.buckets(metric, "drive") == expected_buckets(metrics.DURATION_BUCKETS, [0])
    assert last_hour.value(f"{metric}_sum", name="drive") == 0
    assert last_three_hours.buckets(metric, "paint") == expected_buckets(
        metrics.DURATION_BUCKETS, [10, 3, 45]
    )
    assert last_three_hours.value(f"{metric}_sum", name="paint") == 58


def test_queue_latency_runs_from_enqueue_to_start(session: Session, car: Car) -> None:
    """Given a drive requested with ``later()`` and picked up 30 s later, a paint job that
    started at once, and a second paint job requested then that waited in the lane until
    the first was completed 65 s later, the latency histogram holds 30 s for drive and
    0 s and 65 s for paint."""
    # Given
    define_paint()
    testing.freeze(testing.travel(timedelta()))
    engine.later(car, "drive", 1)
    session.commit()
    testing.travel(timedelta(seconds=30))
    testing.drain()
    engine.now(car, "paint", "red")
    engine.later(car, "paint", "blue")
    session.commit()
    testing.travel(timedelta(seconds=5))
    testing.drain()  # blue is admitted and queued behind red
    testing.travel(timedelta(seconds=60))
    assert engine.complete(car, "paint", "succeeded")
    testing.drain()
    session.expire_all()
    assert [a.status for a in session.scalars(select(Action).where(Action.name == "paint"))] == [
        "succeeded",
        "performing",
    ]

    # When
    result = scrape()

    # Then
    metric = "stepwise_queue_latency_seconds"
    assert result.buckets(metric, "drive") == expected_buckets(metrics.LATENCY_BUCKETS, [30])
    assert result.buckets(metric, "paint") == expected_buckets(metrics.LATENCY_BUCKETS, [0, 65])
    assert result.value(f"{metric}_sum", name="drive") == 30
    assert result.value(f"{metric}_sum", name="paint") == 65
    assert result.value(f"{metric}_count", name="paint") == 2

    # And an hour later they are out of the window
    testing.travel(timedelta(hours=1, seconds=1))
    assert scrape().series(f"{metric}_count") == {}


def test_label_values_are_escaped_in_valid_exposition_text(session: Session, car: Car) -> None:
    """Given an action whose name holds a double quote, a backslash and a newline, its
    label value is escaped (\\", \\\\, \\n) and parses back to the name."""
    # Given
    odd = 'say "hi"\\ there\nnow'
    engine.define(Car, odd, lambda car: None)
    engine.now(car, odd)

    # When
    result = scrape()

    # Then
    assert 'stepwise_actions{name="say \\"hi\\"\\\\ there\\nnow",status="succeeded"} 1.0\n' in result.text
    assert result.value("stepwise_actions", status="succeeded", name=odd) == 1
    assert result.value("stepwise_action_duration_seconds_count", name=odd) == 1
    assert all(line.startswith(("# HELP ", "# TYPE ", "stepwise_")) for line in result.text.splitlines())
