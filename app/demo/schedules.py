"""The demo's schedules: a minutely stock sync (runs show up within a minute of starting the
studio) and a nightly digest at 02:00 in Paris that catches up once after downtime, both
on a service actor (no row needed). ``app.demo`` declares them when it is imported; the
clock (``stepwise clock``, or the embedded one) syncs them.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select

import engine
from engine import action, clock, status
from engine.models import Action


class Housekeeping(engine.Actor):
    """The shop's recurring chores, as a registered service actor."""

    @action
    def sync_stock(self) -> dict[str, Any]:
        """Every minute: count the work in flight, as a stock sync would read the warehouse."""
        with engine.new_session() as session:
            in_flight = session.scalar(
                select(func.count()).select_from(Action).where(Action.status.in_(status.INCOMPLETE))
            )
        return {"synced_at": clock.now().isoformat(timespec="seconds"), "in_flight": int(in_flight or 0)}

    @action
    def nightly_digest(self, recipients: list[str]) -> dict[str, Any]:
        """Every night: the day's digest, mailed to ``recipients``."""
        return {"sent_to": recipients}


HOUSEKEEPING = engine.register_service(Housekeeping(), id="shop")


def declare_schedules() -> None:
    engine.schedule("stock-sync", cron="* * * * *", actor=HOUSEKEEPING, action="sync_stock", overlap="skip")
    engine.schedule(
        "nightly-digest",
        cron="0 2 * * *",
        timezone="Europe/Paris",
        actor=HOUSEKEEPING,
        action="nightly_digest",
        args=[["ops@example.com"]],
        missed="run_once",
    )


declare_schedules()
