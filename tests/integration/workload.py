"""A delivery workload for real workers: trucks queue at ten shared docks, and each
delivery starts children on the truck and its crates. Every action records when it
performed, so a test can check afterwards that no two actions of one lane overlapped.

Workers import it: ``dramatiq engine.jobs tests.integration.workload`` with ``DATABASE_URL``
and ``REDIS_URL`` set. Intervals use PostgreSQL's ``clock_timestamp()``: one clock for
every worker process.
"""

from __future__ import annotations

import faulthandler
import os
import random
import signal
import threading
import time
from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, ForeignKey, String, func, insert, update
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, object_session, relationship

import engine
from engine import Actor, StepContext

#: Roots share these lanes: ``dock/0`` … ``dock/9``.
DOCKS = 10
#: Crates per truck; a truck's crates share its hold's lane.
CRATES = 2
#: Actions in one delivery's tree: deliver, inspect, and stow and unload per crate.
ACTIONS_PER_DELIVERY = 2 + 2 * CRATES
#: Steps in one delivery's tree: deliver has three, its children one each.
STEPS_PER_DELIVERY = 3 + ACTIONS_PER_DELIVERY - 1
#: The longest pause a step body takes after opening its interval, to widen any overlap.
PAUSE_SECONDS = 0.002

if os.environ.get("DATABASE_URL"):
    engine.configure(pool_size=10)
    # ``kill -USR1 <worker pid>`` writes every thread's stack to the worker's log.
    faulthandler.register(signal.SIGUSR1, all_threads=True)


class WorkloadBase(DeclarativeBase):
    pass


class LaneInterval(WorkloadBase):
    """When one action performed: from its first step body to its after-callback, which
    runs in the transaction that completes it and hands its lane over."""

    __tablename__ = "workload_lane_intervals"

    id: Mapped[int] = mapped_column(primary_key=True)
    # Unique: a step body that ran twice would fail here, and its action with it.
    action_id: Mapped[int] = mapped_column(BigInteger, unique=True)
    concurrency_key: Mapped[str] = mapped_column(String(255), index=True)
    started_at: Mapped[datetime]
    ended_at: Mapped[datetime | None]
    #: Which worker performed the first step: "pid/thread name".
    worker: Mapped[str] = mapped_column(String(100))


def interval_opened(step: StepContext) -> None:
    step.session.execute(
        insert(LaneInterval).values(
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
        update(LaneInterval)
        .where(LaneInterval.action_id == action.id)
        .values(ended_at=func.clock_timestamp())
    )


class Truck(Actor, WorkloadBase):
    __tablename__ = "workload_trucks"

    id: Mapped[int] = mapped_column(primary_key=True)
    number: Mapped[int]
    inspections: Mapped[int] = mapped_column(default=0)
    deliveries: Mapped[int] = mapped_column(default=0)
    crates: Mapped[list[Crate]] = relationship(order_by="Crate.id")

    @engine.action(concurrency_key=lambda truck, number: f"dock/{number % DOCKS}")
    def deliver(self, step: StepContext, number: int) -> None:
        """At the dock: inspect the truck and stow its crates, one at a time in its hold's
        lane. The delivery holds the dock's lane until it departs."""
        interval_opened(step)
        step.do("inspect")
        step.on(self.crates, "stow")

    @deliver.step
    def unload_all(self, step: StepContext, number: int) -> None:
        step.on(self.crates, "unload")

    @deliver.step
    def depart(self, step: StepContext, number: int) -> None:
        self.deliveries += 1

    @engine.action
    def inspect(self, step: StepContext) -> None:
        interval_opened(step)
        self.inspections += 1


class Crate(Actor, WorkloadBase):
    __tablename__ = "workload_crates"

    id: Mapped[int] = mapped_column(primary_key=True)
    truck_id: Mapped[int] = mapped_column(ForeignKey("workload_trucks.id"))
    stowed: Mapped[int] = mapped_column(default=0)
    unloaded: Mapped[int] = mapped_column(default=0)

    @engine.action(concurrency_key=lambda crate: f"hold/{crate.truck_id}")
    def stow(self, step: StepContext) -> None:
        interval_opened(step)
        self.stowed += 1

    @engine.action(concurrency_key=lambda crate: f"hold/{crate.truck_id}")
    def unload(self, step: StepContext) -> None:
        interval_opened(step)
        self.unloaded += 1


for actor_class, name in [
    (Truck, "deliver"),
    (Truck, "inspect"),
    (Crate, "stow"),
    (Crate, "unload"),
]:
    engine.definition(actor_class, name).after(interval_closed)
