"""Given a cron schedule in a time zone, when its ticks are computed, then the cron fields
are read in that zone: a daily 09:00 in Europe/Paris is 08:00 UTC in winter and 07:00 UTC in
summer, across the DST change, and a time skipped by the change fires at the next valid
time, a repeated one once. Time zones are explicit: unknown names are refused, UTC is the
default and is stored."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from engine import schedules, testing
from engine.schedules import Rule, ScheduleError
from tests.domain import Car
from tests.schedule_helpers import honking, run_clock, schedule_row, ticks


def test_a_daily_cron_in_paris_keeps_local_time_across_the_spring_change() -> None:
    rule = Rule.of("0 9 * * *", None, "Europe/Paris")
    # 2026-03-29: clocks go from 02:00 to 03:00 in Paris
    assert rule.upcoming(datetime(2026, 3, 27, 12, 0), 3) == [
        datetime(2026, 3, 28, 8, 0),  # 09:00 CET = 08:00 UTC
        datetime(2026, 3, 29, 7, 0),  # 09:00 CEST = 07:00 UTC
        datetime(2026, 3, 30, 7, 0),
    ]


def test_a_daily_cron_in_new_york_across_the_autumn_change() -> None:
    rule = Rule.of("30 6 * * *", None, "America/New_York")
    # 2026-11-01: clocks go back from 02:00 to 01:00 in New York
    assert rule.upcoming(datetime(2026, 10, 31, 0, 0), 2) == [
        datetime(2026, 10, 31, 10, 30),  # EDT, UTC-4
        datetime(2026, 11, 1, 11, 30),  # EST, UTC-5
    ]


def test_a_time_skipped_by_dst_fires_once_at_the_next_valid_time_and_a_repeated_one_once() -> None:
    rule = Rule.of("30 2 * * *", None, "Europe/Paris")
    spring = rule.upcoming(datetime(2026, 3, 28, 12, 0), 2)
    assert spring == [datetime(2026, 3, 29, 1, 0), datetime(2026, 3, 30, 0, 30)]  # 03:00 CEST, then 02:30
    autumn = rule.upcoming(datetime(2026, 10, 24, 12, 0), 2)
    assert autumn == [datetime(2026, 10, 25, 0, 30), datetime(2026, 10, 26, 1, 30)]  # once on the 25th


def test_the_schedule_fires_at_the_utc_instant_of_its_local_time(car: Car) -> None:
    testing.freeze(datetime(2026, 3, 28, 12, 0))
    honking(car, cron="0 9 * * *", timezone="Europe/Paris")
    assert schedule_row().timezone == "Europe/Paris"
    assert schedule_row().next_fire_at == datetime(2026, 3, 29, 7, 0)
    testing.travel(timedelta(hours=19, seconds=1))
    assert run_clock().fired == 1
    assert ticks()[0].due_at == datetime(2026, 3, 29, 7, 0)
    assert schedule_row().next_fire_at == datetime(2026, 3, 30, 7, 0)


def test_utc_is_the_default_and_is_stored(car: Car) -> None:
    honking(car, cron="0 2 * * *")
    assert schedule_row().timezone == schedules.DEFAULT_TIMEZONE == "UTC"


@pytest.mark.parametrize("name", ["Mars/Olympus", "", "../etc/passwd", "Europe/Paris\x00", "x" * 100])
def test_an_unknown_time_zone_is_refused_naming_the_field(name: str) -> None:
    with pytest.raises(ScheduleError) as raised:
        Rule.of("0 2 * * *", None, name or "nowhere")
    assert raised.value.field == "timezone"
    assert "unknown time zone" in str(raised.value)


@pytest.mark.parametrize(
    ("cron", "every", "field", "says"),
    [
        ("61 * * * *", None, "cron", "is not a cron expression"),
        ("0 0 30 2 *", None, "cron", "is not a cron expression"),
        ("* * *", None, "cron", "is not a cron expression"),
        (None, None, "cron", "either a cron expression or an interval"),
        ("* * * * *", 60, "cron", "either a cron expression or an interval"),
        (None, 0.5, "every", "whole number of seconds"),
        (None, 0, "every", "whole number of seconds"),
    ],
)
def test_a_bad_rule_is_refused_naming_the_field(
    cron: str | None, every: float | None, field: str, says: str
) -> None:
    with pytest.raises(ScheduleError) as raised:
        Rule.of(cron, every, "UTC")
    assert raised.value.field == field
    assert says in str(raised.value)


def test_rules_in_words() -> None:
    assert Rule.of("0 2 * * *", None, "Europe/Paris").describe() == "At 02:00 every day (Europe/Paris)"
    assert Rule.of(None, 300, None).describe() == "Every 5 minutes"
    assert Rule.of(None, 1, None).describe() == "Every second"
    assert Rule.of("@hourly", None, None).after(datetime(2026, 1, 1, 0, 30)) == datetime(2026, 1, 1, 1, 0)


def test_intervals_are_aligned_to_the_epoch() -> None:
    rule = Rule.of(None, timedelta(hours=1), None)
    assert rule.after(datetime(2026, 1, 1, 10, 17)) == datetime(2026, 1, 1, 11, 0)
    assert rule.after(datetime(2026, 1, 1, 11, 0)) == datetime(2026, 1, 1, 12, 0)
