"""The demo: actors whose workflows keep running, so a new studio is alive at once.

- A ``Deployment``, like the one Stepped was extracted from: DNS provisioning that waits for
  the provider's webhook (outbound; the demo's provider answers after a few seconds, except
  for one deployment in four, left for an operator to approve), instances launched in
  parallel (retried when a launch fails), a health check with a timeout, then the traffic
  switched. Deployments of one app share a lane: a newer one supersedes the queued one.
- An ``Order``: payment, then stock, then shipping, each stage's result feeding the next;
  an order of 500.00 or more waits for a manual review (an approval signal with a 30
  minute deadline): Approve (with ``{"shipping": "express"}`` for the express branch) or
  Reject in the studio. The payment and the stock register their compensations (refund
  the payment, release the stock): the carrier refuses one order in five (its id a
  multiple of 5), and then the order compensates, releasing the stock, then refunding
  the payment; the bank refuses one of those refunds in four (an id that is a multiple of
  20), left for an operator to retry or skip ("compensation failed").
- Schedules (app/demo/schedules.py): a minutely stock sync and a nightly digest.
- A ``Report`` whose data fetch sometimes fails (retry it from the studio), whose
  generation processes its chunks heartbeating a checkpoint (a lost worker's report
  resumes where it stopped; watch the heartbeat and progress on its page), and whose PDF
  rendering fails now and then but has a retry policy; a checksum per period makes
  achievements, so a report already published for its period is skipped.

``stepwise serve --demo`` imports this module and runs a ``Demo`` thread (app/demo/runner.py)
that starts new workflows every few seconds, bounded by how many are in flight. Separate
workers import it through ``STEPWISE_IMPORTS=app.demo``. The workflows are this package's
``__init__`` so that ``app.demo`` stays the module to import and the name of its error
classes as the history records them (``app.demo.LaunchFailed``).
"""

from __future__ import annotations

import logging
import random
import time
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import String
from sqlalchemy.orm import Mapped, mapped_column

import engine
from engine import RetryPolicy, action, clock

from ..database import db
from . import schedules  # noqa: F401 - declares the demo's nightly and minutely schedules

log = logging.getLogger("stepwise.demo")

APPS = ("storefront", "billing-api", "search")
CUSTOMERS = ("ada", "grace", "linus", "barbara", "ken")
REPORTS = ("sales", "inventory", "churn")
PERIODS = ("2025-W01", "2025-W02", "2025-W03")
#: Orders of this amount or more wait for a manual review (an approval signal)...
LARGE_ORDER_CENTS = 50_000
#: ...for at most this long; then the order fails.
REVIEW_DEADLINE = timedelta(minutes=30)
#: A report's generation: its chunks, how long each takes, and its heartbeat timeout.
REPORT_CHUNKS = 8
REPORT_CHUNK_SECONDS = 0.5
REPORT_HEARTBEAT_TIMEOUT = timedelta(seconds=10)


class LaunchFailed(Exception):
    """Raised when the demo's cloud has no capacity for an instance (at random)."""


class WarehouseUnavailable(Exception):
    """Raised when the demo's warehouse database does not answer (at random)."""


class RendererBusy(Exception):
    """Raised when the demo's PDF renderer is busy (at random)."""


class CarrierRefused(Exception):
    """Raised when the demo's carrier refuses a shipment (one order in five)."""


class RefundRefused(Exception):
    """Raised when the demo's bank refuses a refund (one failed order in four)."""


#: The carrier refuses the orders whose id is a multiple of this...
SHIPPING_FAILS_EVERY = 5
#: ...and the bank the refunds of those whose id is a multiple of this.
REFUND_FAILS_EVERY = 20


class Deployment(engine.Actor, db.Model):
    __tablename__ = "demo_deployments"

    id: Mapped[int] = mapped_column(primary_key=True)
    app_name: Mapped[str] = mapped_column(String(40))
    version: Mapped[int]
    hostname: Mapped[str] = mapped_column(String(120))
    instances: Mapped[int] = mapped_column(default=2)
    live: Mapped[bool] = mapped_column(default=False)
    created_at: Mapped[datetime] = mapped_column(default=clock.now)

    @action(concurrency_key=lambda d: ["deploy", d.app_name])
    def deploy(self, step: Any) -> None:
        step.do("provision_dns", self.hostname)

    @deploy.step
    def launch(self, step: Any) -> None:
        for index in range(self.instances):
            step.do("launch_instance", index)

    @deploy.step
    def check(self, step: Any) -> None:
        step.do("health_check")

    @deploy.step
    def switch(self, step: Any) -> None:
        step.do("switch_traffic")

    @action(
        outbound=True,
        timeout=timedelta(minutes=3),
        checksum=lambda d, hostname: hostname,
        checksum_key=lambda d, hostname: ["dns", hostname],
    )
    def provision_dns(self, hostname: str) -> None:
        """Ask the DNS provider for the record; the provider's webhook completes the action.
        A hostname already provisioned is an achievement: the step is skipped."""

    @action(
        concurrency_key=lambda d, index: ["instance", d.app_name, str(index)],
        retry=RetryPolicy(max_attempts=3, initial_interval=timedelta(seconds=1)),
    )
    def launch_instance(self, index: int) -> None:
        time.sleep(random.uniform(0.05, 0.4))
        if random.random() < 0.2:
            raise LaunchFailed(f"no capacity left for instance {index} of {self.app_name}")

    @action(timeout=timedelta(seconds=4))
    def health_check(self, step: Any) -> None:
        """Wait for the new instances to answer; slower than 4 seconds times it out."""
        step.wait(timedelta(seconds=random.uniform(0.5, 4.6)))

    @action(concurrency_key=lambda d: ["traffic", d.app_name])
    def switch_traffic(self) -> None:
        self.live = True


class Order(engine.Actor, db.Model):
    __tablename__ = "demo_orders"

    id: Mapped[int] = mapped_column(primary_key=True)
    customer: Mapped[str] = mapped_column(String(40))
    amount_cents: Mapped[int]
    reserved: Mapped[bool] = mapped_column(default=False)
    paid: Mapped[bool] = mapped_column(default=False)
    shipped: Mapped[bool] = mapped_column(default=False)
    created_at: Mapped[datetime] = mapped_column(default=clock.now)

    @action
    def fulfil(self, step: Any) -> None:
        """Payment, then stock, then shipping, each stage's result feeding the next; an
        order of LARGE_ORDER_CENTS or more waits for a manual review first. If the order
        fails, the payment is refunded (with the payment the charge returned)."""
        step.do("take_payment", self.amount_cents)
        step.compensate("refund_payment", step.child_result("take_payment"))

    @fulfil.step
    def screen(self, step: Any) -> dict[str, Any]:
        payment = step.results[0]
        if self.amount_cents < LARGE_ORDER_CENTS:
            step.go_to("reserve")  # small: no review
        return payment

    @fulfil.step
    def review(self, step: Any) -> None:
        """Large orders: an operator approves (optionally {"shipping": "express"}) or rejects."""
        step.wait_for_approval(timeout=REVIEW_DEADLINE)

    @fulfil.step
    def reviewed(self, step: Any) -> None:
        answer = step.signal
        if answer is None:
            step.fail(f"manual review: no answer within {REVIEW_DEADLINE}")
        elif answer.name == "rejected":
            step.fail(f"manual review: rejected by {answer.sent_by or 'an operator'}")
        elif isinstance(answer.payload, dict) and answer.payload.get("shipping") == "express":
            step.go_to("express")

    @fulfil.step
    def reserve(self, step: Any) -> None:
        step.do("reserve_stock")
        step.compensate("release_stock", step.child_result("reserve_stock"))

    @fulfil.step
    def dispatch(self, step: Any) -> None:
        stock = step.results[0]
        step.do("ship", "standard", stock["bin"])

    @fulfil.step
    def delivered(self, step: Any) -> dict[str, Any]:
        step.finish({"shipping": step.results[0]})

    @fulfil.step
    def express(self, step: Any) -> None:
        step.do("reserve_stock")
        step.compensate("release_stock", step.child_result("reserve_stock"))
        step.do("ship", "express", 0)

    @fulfil.step
    def sent_express(self, step: Any) -> dict[str, Any]:
        return {"shipping": step.results[1]}

    @action
    def take_payment(self, amount_cents: int) -> dict[str, Any]:
        self.paid = True
        return {"payment": f"pay-{self.id}", "amount_cents": amount_cents}

    @action
    def reserve_stock(self) -> dict[str, int]:
        self.reserved = True
        return {"bin": 1 + self.id % 40}

    @action(retry=RetryPolicy(max_attempts=2, initial_interval=timedelta(seconds=1)))
    def ship(self, speed: str, bin_number: int) -> str:
        if self.id % SHIPPING_FAILS_EVERY == 0:
            raise CarrierRefused(f"the carrier refused order {self.id}")
        self.shipped = True
        return f"{speed} from bin {bin_number}" if bin_number else speed

    @action(retry=RetryPolicy(max_attempts=2, initial_interval=timedelta(seconds=1)))
    def refund_payment(self, payment: dict[str, Any]) -> dict[str, Any]:
        """Undo ``take_payment``: the payment it returned is refunded."""
        time.sleep(random.uniform(0.2, 0.8))  # the bank takes its time: watch it run
        if self.id % REFUND_FAILS_EVERY == 0:
            raise RefundRefused(f"the bank refused the refund of {payment['payment']}")
        self.paid = False
        return {"refunded": payment["payment"], "amount_cents": payment["amount_cents"]}

    @action
    def release_stock(self, stock: dict[str, int]) -> None:
        """Undo ``reserve_stock``: the bin it reserved is free again."""
        time.sleep(random.uniform(0.2, 0.8))
        self.reserved = False


class Report(engine.Actor, db.Model):
    __tablename__ = "demo_reports"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(40))
    period: Mapped[str] = mapped_column(String(20))
    rows: Mapped[int | None]
    published: Mapped[bool] = mapped_column(default=False)
    created_at: Mapped[datetime] = mapped_column(default=clock.now)

    @action(
        concurrency_key=lambda r: ["report", r.name],
        checksum=lambda r: [r.name, r.period],
        checksum_key=lambda r: ["report", r.name],
    )
    def publish(self, step: Any) -> None:
        step.do("fetch_rows")

    @publish.step(heartbeat_timeout=REPORT_HEARTBEAT_TIMEOUT, attempt_timeout=timedelta(minutes=2))
    def generate(self, step: Any) -> dict[str, int]:
        """Process the report's chunks, heartbeating the index of the next one: an attempt
        whose worker dies is retried from there once no heartbeat came for 10 s."""
        start = step.checkpoint or 0
        for chunk in range(start, REPORT_CHUNKS):
            time.sleep(REPORT_CHUNK_SECONDS)
            step.heartbeat(progress=(chunk + 1) / REPORT_CHUNKS, checkpoint=chunk + 1)
        return {"chunks": REPORT_CHUNKS, "resumed_at": start}

    @publish.step
    def render(self, step: Any) -> None:
        step.do("render_pdf")

    def fetch_rows(self) -> None:
        """No retry policy: a failure fails the report, for an operator to retry."""
        if random.random() < 0.25:
            raise WarehouseUnavailable(f"the warehouse database did not answer for {self.name}")
        self.rows = random.randint(100, 5000)

    @action(retry=RetryPolicy(max_attempts=4, initial_interval=timedelta(seconds=1), backoff=2))
    def render_pdf(self) -> None:
        if random.random() < 0.4:
            raise RendererBusy("the PDF renderer is busy")
        self.published = True
