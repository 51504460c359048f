"""Given the demo (``stepwise serve --demo``), its schedules are declared: a minutely stock
sync and a nightly digest at 02:00 in Paris that catches up once; synced, the minutely one
fires within a minute and its action succeeds, and both show on the Schedules page."""

from __future__ import annotations

from datetime import datetime, timedelta

from app.demo import schedules as demo_schedules
from engine import schedules, testing
from tests.schedule_helpers import actions_started, run_clock, schedule_row
from tests.studio.support import StudioClient


def test_the_demo_schedules_fire_and_show(operator_client: StudioClient) -> None:
    testing.freeze(datetime(2026, 6, 1, 12, 0, 10))
    schedules.forget_declared()
    demo_schedules.declare_schedules()
    assert sorted(schedules.sync().created) == ["nightly-digest", "stock-sync"]
    nightly = schedule_row("nightly-digest")
    assert (nightly.cron, nightly.timezone, nightly.missed) == ("0 2 * * *", "Europe/Paris", "run_once")
    assert nightly.next_fire_at == datetime(2026, 6, 2, 0, 0)  # 02:00 CEST

    testing.travel(timedelta(seconds=50))
    assert run_clock().fired == 1
    [sync] = actions_started("sync_stock")
    assert sync.status == "succeeded"

    page = operator_client.get("/schedules/").text
    assert "stock-sync" in page and "nightly-digest" in page and "declared in code" in page
    schedules.forget_declared()
