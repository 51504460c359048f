"""Given schedules that fired, skipped and missed ticks, when the metrics are rendered, then
Prometheus sees the lag of each fired tick (due time to firing) as a histogram by schedule,
the ticks fired and skipped (by reason) as monotonic counters, the schedules active and
paused, and how overdue the most overdue active schedule is (it grows while no clock runs)."""

from __future__ import annotations

from datetime import timedelta

import engine
from engine import schedules, testing
from tests.domain import Car
from tests.metrics_exposition import scrape
from tests.schedule_helpers import MONDAY, honking, run_clock


def test_lag_fired_skipped_missed_and_overdue(car: Car) -> None:
    testing.freeze(MONDAY)
    honking(car, overlap="skip")  # minutely
    honking(car, name="hourly", cron="0 * * * *", missed="skip")
    engine.define(Car, "honk", lambda car: None, outbound=True)  # a run that keeps going
    schedules.pause("hourly", by="olga")
    schedules.resume("hourly", by="olga")

    # 09:00:02: both fire 2 s late; at 09:01:02 the minutely is skipped (its run is still going)
    testing.travel(timedelta(seconds=32))
    run_clock()
    testing.travel(timedelta(minutes=1))
    run_clock()
    early = scrape()  # the lag histogram covers the ticks fired in the last hour
    lag = {
        float(dict(labels)["le"]): value
        for labels, value in early.series("stepwise_schedule_lag_seconds_bucket").items()
        if dict(labels)["schedule"] == "honker"
    }
    assert lag[1.0] == 0 and lag[2.0] == 1 and lag[float("inf")] == 1
    assert early.value("stepwise_schedule_lag_seconds_sum", schedule="honker") == 2
    # The clock stops; at 11:30 the overdue gauge shows the minutely's 09:02 tick waited 2h28
    testing.travel(timedelta(hours=2, minutes=28, seconds=58))
    before = scrape()
    assert before.value("stepwise_schedule_overdue_seconds") == 8880
    run_clock()  # the hourly's 10:00 and 11:00 were missed; the minutely's 11:30 skipped again
    schedules.pause("honker", by="olga")

    result = scrape()
    assert result.value("stepwise_schedule_ticks_fired_total") == 2
    assert result.value("stepwise_schedule_ticks_skipped_total", reason="skipped") == 2
    # 2 of the hourly's, and the minutely's 148 ticks from 09:02 to 11:29 (its 11:30 was skipped)
    assert result.value("stepwise_schedule_ticks_skipped_total", reason="missed") == 150
    assert result.value("stepwise_schedules", state="active") == 1
    assert result.value("stepwise_schedules", state="paused") == 1
    assert result.value("stepwise_schedule_overdue_seconds") == 0
