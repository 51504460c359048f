"""The chaos workload: orders, each packed as two parcels, each parcel labelled and some
shipped. Three levels per tree, lanes shared across trees, a flaky step that retries, a
durable timer, and outbound shipments that the test completes from outside, as a carrier's
webhook would.

    Order.fulfil            (its own lane)         step 1: pack every parcel; step 2: wait; step 3: close
      Parcel.pack           ("bench/<order>")      step 1: label, and ship if outbound; step 2: seal
        Parcel.label        ("printer/<n % 16>")   fails its first attempt for every 7th parcel
        Parcel.ship         ("carrier/<n % 8>")    outbound: performing until completed from outside

Workers import it: ``dramatiq engine.jobs tests.integration.chaos_workload`` with
``DATABASE_URL`` and ``REDIS_URL`` or ``RABBITMQ_URL`` set. Every action records when it performed
(``tests/integration/intervals.py``), so the test can look for two actions of one lane that
performed at once.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import ForeignKey
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

import engine
from engine import Actor, RetryPolicy, StepContext
from tests.integration.intervals import IntervalRecorder, LaneIntervalColumns, configure_worker

PARCELS_PER_ORDER = 2
PRINTERS = 16
CARRIERS = 8
#: Every n-th parcel is shipped: an outbound leaf, completed by the test's completer.
SHIPPED_EVERY = 3
#: Every n-th parcel's label fails its first attempt (then retries and succeeds).
FLAKY_EVERY = 7
#: Every n-th shipment is completed as failed, failing its tree.
LOST_EVERY = 25
#: How long an order rests between packing and closing: a ``step.wait``.
WAIT_SECONDS = 0.5
#: The longest pause a step body takes after opening its interval, to widen any overlap.
PAUSE_SECONDS = 0.003

configure_worker()


class ChaosBase(DeclarativeBase):
    pass


class ChaosInterval(LaneIntervalColumns, ChaosBase):
    __tablename__ = "chaos_lane_intervals"


class Flaky(RuntimeError):
    """Raised when a label's first attempt fails on purpose."""


intervals = IntervalRecorder(ChaosInterval, PAUSE_SECONDS)


class Order(Actor, ChaosBase):
    # The demo (app/demo/__init__.py) has an Order too: actor types are class names unless a class
    # names its own, and two classes under one type are refused (engine.ActorTypeTaken).
    __actor_type__ = "ChaosOrder"
    __tablename__ = "chaos_orders"

    id: Mapped[int] = mapped_column(primary_key=True)
    number: Mapped[int]
    closings: Mapped[int] = mapped_column(default=0)
    parcels: Mapped[list[Parcel]] = relationship(order_by="Parcel.id")

    @engine.action
    def fulfil(self, step: StepContext, number: int) -> None:
        intervals.opened(step)
        step.on(self.parcels, "pack")

    @fulfil.step
    def rest(self, step: StepContext, number: int) -> None:
        """A durable timer: its message waits in the broker's delay queue (held by a worker
        until due, on either broker), which a Redis restart empties."""
        step.wait(WAIT_SECONDS)

    @fulfil.step
    def close(self, step: StepContext, number: int) -> None:
        self.closings += 1


class Parcel(Actor, ChaosBase):
    __tablename__ = "chaos_parcels"

    id: Mapped[int] = mapped_column(primary_key=True)
    order_id: Mapped[int] = mapped_column(ForeignKey("chaos_orders.id"))
    number: Mapped[int]
    outbound: Mapped[bool] = mapped_column(default=False)
    sealed: Mapped[int] = mapped_column(default=0)
    labelled: Mapped[int] = mapped_column(default=0)
    handed_over: Mapped[int] = mapped_column(default=0)

    @engine.action(concurrency_key=lambda parcel: f"bench/{parcel.order_id}")
    def pack(self, step: StepContext) -> None:
        """The order's parcels take turns at its bench; each holds it until its label
        is printed and its shipment, if any, is completed."""
        intervals.opened(step)
        step.do("label")
        if self.outbound:
            step.do("ship")

    @pack.step
    def seal(self, step: StepContext) -> None:
        self.sealed += 1

    @engine.action(
        concurrency_key=lambda parcel: f"printer/{parcel.number % PRINTERS}",
        retry=RetryPolicy(max_attempts=3, initial_interval=timedelta(milliseconds=200), jitter=0),
    )
    def label(self, step: StepContext) -> None:
        if step.step.attempt == 1 and self.number % FLAKY_EVERY == 0:
            raise Flaky(f"the printer jammed on parcel {self.number}")
        intervals.opened(step)
        self.labelled += 1

    @engine.action(outbound=True, concurrency_key=lambda parcel: f"carrier/{parcel.number % CARRIERS}")
    def ship(self, step: StepContext) -> None:
        intervals.opened(step)
        self.handed_over += 1


intervals.close_after((Order, "fulfil"), (Parcel, "pack"), (Parcel, "label"), (Parcel, "ship"))
