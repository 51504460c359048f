"""The chaos workload: orders, each packed as two parcels, each parcel labelled and some
shipped. Three levels per tree, lanes shared across trees, a flaky step that retries, a
durable timer, and outbound shipments that the test completes from outside, as a carrier's
webhook would.

    Order.fulfil            (its own lane)         step 1: pack every parcel; step 2: wait; step 3: close
      Parcel.pack           ("bench/<order>")      step 1: label, and ship if outbound; step 2: seal
        Parcel.label        ("printer/<n % 16>")   fails its first attempt for every 7th parcel
        Parcel.ship         ("carrier/<n % 8>")    outbound: performing until completed from outside

Workers import it: ``dramatiq engine.jobs tests.integration.chaos_workload`` with
``DATABASE_URL`` and ``REDIS_URL`` set. Every action records when it performed, with
PostgreSQL's ``clock_timestamp()`` (one clock for every process), so the test can look for
two actions of one lane that performed at once.
"""

from __future__ import annotations

import faulthandler
import os
import random
import signal
import threading
import time
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import BigInteger, ForeignKey, String, func, insert, update
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, object_session, relationship

import engine
from engine import Actor, RetryPolicy, StepContext

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

if os.environ.get("DATABASE_URL"):
    engine.configure(pool_size=10)
    # ``kill -USR1 <worker pid>`` writes every thread's stack to the worker's log.
    faulthandler.register(signal.SIGUSR1, all_threads=True)


class ChaosBase(DeclarativeBase):
    pass


class ChaosInterval(ChaosBase):
    """When one action performed: from its first step body to its after-callback, which
    runs in the transaction that completes it and hands its lane over. A body whose
    transaction a kill rolled back leaves no row."""

    __tablename__ = "chaos_lane_intervals"

    id: Mapped[int] = mapped_column(primary_key=True)
    # Unique: a first step body that committed twice would fail here.
    action_id: Mapped[int] = mapped_column(BigInteger, unique=True)
    concurrency_key: Mapped[str] = mapped_column(String(255), index=True)
    started_at: Mapped[datetime]
    ended_at: Mapped[datetime | None]
    #: "pid/thread name" of the worker that ran the first step body.
    worker: Mapped[str] = mapped_column(String(100))


class Flaky(RuntimeError):
    """Raised when a label's first attempt fails on purpose."""


def interval_opened(step: StepContext) -> None:
    step.session.execute(
        insert(ChaosInterval).values(
            action_id=step.action.id,
            concurrency_key=step.action.concurrency_key,
            started_at=func.clock_timestamp(),
            worker=f"{os.getpid()}/{threading.current_thread().name}",
        )
    )
    time.sleep(random.uniform(0, PAUSE_SECONDS))


def interval_closed(actor: Any, action: engine.Action, *arguments: Any) -> None:
    session = object_session(action)
    assert session is not None
    session.execute(
        update(ChaosInterval)
        .where(ChaosInterval.action_id == action.id)
        .values(ended_at=func.clock_timestamp())
    )


class Order(Actor, ChaosBase):
    __tablename__ = "chaos_orders"

    id: Mapped[int] = mapped_column(primary_key=True)
    number: Mapped[int]
    closings: Mapped[int] = mapped_column(default=0)
    parcels: Mapped[list[Parcel]] = relationship(order_by="Parcel.id")

    @engine.action
    def fulfil(self, step: StepContext, number: int) -> None:
        interval_opened(step)
        step.on(self.parcels, "pack")

    @fulfil.step
    def rest(self, step: StepContext, number: int) -> None:
        """A durable timer: its message waits in Redis's delay queue, which a restart empties."""
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
        interval_opened(step)
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
        interval_opened(step)
        self.labelled += 1

    @engine.action(outbound=True, concurrency_key=lambda parcel: f"carrier/{parcel.number % CARRIERS}")
    def ship(self, step: StepContext) -> None:
        interval_opened(step)
        self.handed_over += 1


for actor_class, name in [(Order, "fulfil"), (Parcel, "pack"), (Parcel, "label"), (Parcel, "ship")]:
    engine.definition(actor_class, name).after(interval_closed)
