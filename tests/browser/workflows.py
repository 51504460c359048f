"""The browser tests' own workflows: deterministic, unlike the demo's random ones, so that a
test knows which tree failed, which approval waits and which lane moves next.

The studio under test imports this module (``STEPWISE_IMPORTS=tests.browser.workflows``),
and the tests seed its database before it starts, in a separate process:

    python -c "import sys; from tests.browser.workflows import main; sys.exit(main(sys.argv[1:]))" \
        seed sqlite:////tmp/x/studio.db   # prints the ids as JSON (support.SEED_COMMAND)

- ``Forecast.publish`` (a tree of depth 3): ``gather`` calls ``query_warehouse`` (whose step
  calls ``open_connection``) and ``read_calendar``; then ``render`` calls ``render_chart``.
  While seeding, the warehouse of the forecasts seeded to fail is offline:
  ``open_connection`` raises, which fails ``query_warehouse``, then ``publish``. That is
  the failure path root -> query_warehouse -> open_connection; ``read_calendar`` succeeded
  beside it. In the studio's process the warehouse is online: a retry succeeds. The west
  forecast's failed leaf is there to be skipped. A
  forecast per region and week is an achievement (checksum), so there is one to show.
- ``Refund.process`` shares a lane per customer (``refunds/<customer>``): ``check``, then
  ``approve`` waits for a manager's approval (the outbound ``manager_approval``), then
  ``pay_out``. Seeded: three refunds of one customer. The first waits for approval, the
  second was queued behind it and was superseded by the third. Approving the first's
  approval lets it pay out, and the lane moves on to the third. Another customer's refund
  waits for its approval too (for the screenshots, which run after the walk-through).
- ``Refund.reconcile`` has a timeout shorter than its step's wait: seeded timed out.
- ``Parcel.send`` (tests/browser/compensation_workflows.py) compensates when its shipping
  is rejected.
- For the operator's day (tests/browser/test_operators_day.py): two more forecasts seeded to
  fail ("alpine", "coast"), whose failing leaves are retried as a selection, and a refund of
  customer "hopper" whose approval is decided from the overview.
- For the "select all" box (tests/browser/test_selecting_every_row_of_a_page.py): three
  forecasts of week 2025-W12 ("fjord", "glacier", "harbour") whose warehouse was busy
  (``WarehouseBusy``, an error of their own): their failing leaves are that error's list.

These models have their own declarative base: the seeding process makes their tables.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import timedelta
from typing import Any

from sqlalchemy import String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

import engine
from engine import action
from tests.browser import compensation_workflows

#: How long the warehouse takes to answer in the studio's process: the walk-through sees
#: the retried tree performing before it succeeds. Seeding sets it to 0.
answer_seconds = float(os.environ.get("STEPWISE_BROWSER_ANSWER_SECONDS", "2.0"))

#: Set by the seeding process for the forecasts it seeds to fail.
warehouse_online = True


class WarehouseOffline(Exception):
    """The forecast warehouse did not answer."""


class WarehouseBusy(Exception):
    """The forecast warehouse was too busy to answer."""


#: What the offline warehouse raises while seeding (the page-selection forecasts: busy).
offline_error: type[Exception] = WarehouseOffline


class Base(DeclarativeBase):
    pass


class Forecast(engine.Actor, Base):
    __tablename__ = "browser_forecasts"

    id: Mapped[int] = mapped_column(primary_key=True)
    region: Mapped[str] = mapped_column(String(40))
    week: Mapped[str] = mapped_column(String(10))
    rows: Mapped[int] = mapped_column(default=0)
    published: Mapped[bool] = mapped_column(default=False)

    @action(
        checksum=lambda f: [f.region, f.week],
        checksum_key=lambda f: ["forecast", f.region],
    )
    def publish(self, step: Any) -> None:
        """Gather the data, then render the chart."""
        step.do("query_warehouse", self.week)
        step.do("read_calendar")

    @publish.step
    def render(self, step: Any) -> None:
        step.do("render_chart")

    @action
    def query_warehouse(self, step: Any, week: str) -> None:
        step.do("open_connection")

    @query_warehouse.step
    def count_rows(self, step: Any, week: str) -> None:
        self.rows = 1200

    def open_connection(self) -> None:
        if not warehouse_online:
            raise offline_error(f"the warehouse did not answer for {self.region}")
        time.sleep(answer_seconds)

    def read_calendar(self) -> None:
        pass

    def render_chart(self) -> None:
        self.published = True


class Refund(engine.Actor, Base):
    __tablename__ = "browser_refunds"

    id: Mapped[int] = mapped_column(primary_key=True)
    customer: Mapped[str] = mapped_column(String(40))
    amount_cents: Mapped[int]
    checked: Mapped[bool] = mapped_column(default=False)
    paid: Mapped[bool] = mapped_column(default=False)

    @action(concurrency_key=lambda r: ["refunds", r.customer])
    def process(self, step: Any) -> None:
        self.checked = True

    @process.step
    def approve(self, step: Any) -> None:
        step.do("manager_approval", self.amount_cents)

    @process.step
    def pay(self, step: Any) -> None:
        self.paid = True

    @action(outbound=True)
    def manager_approval(self, amount_cents: int) -> None:
        """Waits for a manager: Approve or Reject in the studio."""

    @action(timeout=timedelta(seconds=1))
    def reconcile(self, step: Any) -> None:
        step.wait(timedelta(seconds=30))

    @action(concurrency_key=lambda r: ["reviews", r.id])
    def review(self, step: Any) -> None:
        """A large refund waits for a manager's approval signal; its payload picks the branch."""
        step.wait_for_approval(timeout=timedelta(hours=1))

    @review.step
    def route(self, step: Any) -> None:
        answer = step.signal
        if answer is None or answer.name == "rejected":
            step.fail("not approved")
        elif isinstance(answer.payload, dict) and answer.payload.get("shipping") == "express":
            step.go_to("express")

    @review.step
    def standard(self, step: Any) -> None:
        step.finish("standard")

    @review.step
    def express(self, step: Any) -> str:
        return "express"


def seed(url: str) -> dict[str, Any]:
    """Make the schema and the walk-through's data on ``url``; returns the ids the tests use."""
    global answer_seconds
    from sqlalchemy import select

    from engine import testing
    from engine.models import Action

    sa_engine = engine.configure(url)
    engine.upgrade()
    Base.metadata.create_all(sa_engine)
    testing.setup()
    answer_seconds = 0

    with engine.new_session() as session, engine.handling():

        def root(actor: Any, name: str) -> int:
            return int(
                session.scalars(
                    select(Action.id).where(
                        Action.actor_type == type(actor).__name__,
                        Action.actor_id == str(actor.id),
                        Action.name == name,
                    )
                ).one()
            )

        def start(
            actor: Any, name: str, *, online: bool = True, error: type[Exception] = WarehouseOffline
        ) -> int:
            global warehouse_online, offline_error
            warehouse_online, offline_error = online, error
            session.add(actor)
            session.flush()
            engine.later(actor, name)
            session.commit()
            testing.drain()
            warehouse_online, offline_error = True, WarehouseOffline
            return root(actor, name)

        published = start(Forecast(region="north", week="2025-W10"), "publish")
        south = Forecast(region="south", week="2025-W10")
        failed = start(south, "publish", online=False)
        failing_leaf = root(south, "open_connection")
        to_retry = start(Forecast(region="east", week="2025-W10"), "publish", online=False)
        west = Forecast(region="west", week="2025-W10")
        to_skip = start(west, "publish", online=False)
        to_skip_leaf = root(west, "open_connection")

        first, second, third = (Refund(customer="ada", amount_cents=cents) for cents in (1250, 4800, 990))
        waiting = start(first, "process")
        superseded = start(second, "process")
        replacing = start(third, "process")
        approval = root(first, "manager_approval")
        other = Refund(customer="linus", amount_cents=15_000)
        start(other, "process")
        other_approval = root(other, "manager_approval")

        late = Refund(customer="grace", amount_cents=300)
        session.add(late)
        session.flush()
        engine.later(late, "reconcile")
        session.commit()
        testing.drain()
        time.sleep(1.2)  # past reconcile's timeout of 1s
        testing.drain()
        timed_out = root(late, "reconcile")

        selected_roots, selected_leaves = [], []
        for region in ("alpine", "coast"):
            forecast = Forecast(region=region, week="2025-W11")
            selected_roots.append(start(forecast, "publish", online=False))
            selected_leaves.append(root(forecast, "open_connection"))
        busy_roots, busy_leaves = [], []
        for region in ("fjord", "glacier", "harbour"):
            forecast = Forecast(region=region, week="2025-W12")
            busy_roots.append(start(forecast, "publish", online=False, error=WarehouseBusy))
            busy_leaves.append(root(forecast, "open_connection"))
        reviewed = start(Refund(customer="turing", amount_cents=99_000), "review")
        hopper = Refund(customer="hopper", amount_cents=2500)
        overview_refund = start(hopper, "process")
        overview_approval = root(hopper, "manager_approval")
        start.root = root  # type: ignore[attr-defined]
        compensating = compensation_workflows.seed(sa_engine, session, start)

    return {
        "published": published,
        "failed": failed,
        "failing_leaf": failing_leaf,
        "to_retry": to_retry,
        "to_skip": to_skip,
        "to_skip_leaf": to_skip_leaf,
        "waiting_refund": waiting,
        "approval": approval,
        "superseded_refund": superseded,
        "next_refund": replacing,
        "other_approval": other_approval,
        "timed_out": timed_out,
        "lane": "refunds/ada",
        "selected_roots": selected_roots,
        "selected_leaves": selected_leaves,
        "busy_roots": busy_roots,
        "busy_leaves": busy_leaves,
        "overview_refund": overview_refund,
        "overview_approval": overview_approval,
        "signal_review": reviewed,
        **compensating,
    }


def main(argv: list[str]) -> int:
    """``seed DATABASE_URL``: seed, then print the ids as JSON on the last line."""
    if len(argv) != 2 or argv[0] != "seed":
        print("usage: seed DATABASE_URL (see support.SEED_COMMAND)", file=sys.stderr)
        return 2
    print(json.dumps(seed(argv[1])))
    return 0
