"""Every timestamp the engine writes comes from ``engine.clock.now()``: the system's time in
UTC, naive, to the microsecond; moved by ``engine.testing``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from engine import clock


def utc() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def test_now_is_the_systems_utc_time_without_a_zone() -> None:
    before = utc()
    read = clock.now()
    after = utc()
    assert read.tzinfo is None
    assert before <= read <= after


def test_travel_moves_a_running_clock_and_reset_brings_it_back() -> None:
    try:
        before = utc()
        moved = clock.travel(timedelta(hours=3))
        after = utc()
        assert before + timedelta(hours=3) <= moved <= after + timedelta(hours=3)
    finally:
        clock.reset()
    before = utc()
    assert before <= clock.now() <= utc()
