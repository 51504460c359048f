"""A delivery workload for real workers: trucks queue at ten shared docks, and each
delivery starts children on the truck and its crates. Every action records when it
performed, so a test can check afterwards that no two actions of one lane overlapped.

Workers import it: ``dramatiq engine.jobs tests.integration.workload`` with ``DATABASE_URL``
and ``REDIS_URL`` or ``RABBITMQ_URL`` set. The intervals are recorded as
``tests/integration/intervals.py`` says.
"""

from __future__ import annotations

from sqlalchemy import ForeignKey, String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

import engine
from engine import Actor, StepContext
from tests.integration.intervals import IntervalRecorder, LaneIntervalColumns, configure_worker

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

configure_worker()


class WorkloadBase(DeclarativeBase):
    pass


class LaneInterval(LaneIntervalColumns, WorkloadBase):
    __tablename__ = "workload_lane_intervals"


intervals = IntervalRecorder(LaneInterval, PAUSE_SECONDS)


class Truck(Actor, WorkloadBase):
    __tablename__ = "workload_trucks"

    id: Mapped[int] = mapped_column(primary_key=True)
    number: Mapped[int]
    inspections: Mapped[int] = mapped_column(default=0)
    deliveries: Mapped[int] = mapped_column(default=0)
    cleared_by: Mapped[str | None] = mapped_column(String(200))
    crates: Mapped[list[Crate]] = relationship(order_by="Crate.id")

    @engine.action(concurrency_key=lambda truck, number: f"dock/{number % DOCKS}")
    def deliver(self, step: StepContext, number: int) -> None:
        """At the dock: inspect the truck and stow its crates, one at a time in its hold's
        lane. The delivery holds the dock's lane until it departs."""
        intervals.opened(step)
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
        intervals.opened(step)
        self.inspections += 1

    @engine.action(concurrency_key=lambda truck: f"gate/{truck.id}")
    def clear(self, step: StepContext) -> None:
        """At the gate: wait for customs to clear the truck (a signal), then record who did."""
        step.wait_for("cleared", "refused")

    @clear.step
    def leave(self, step: StepContext) -> str:
        signal = step.signal
        assert signal is not None
        self.cleared_by = f"{signal.name} by {signal.sent_by}: {signal.payload}"
        return signal.name


class Crate(Actor, WorkloadBase):
    __tablename__ = "workload_crates"

    id: Mapped[int] = mapped_column(primary_key=True)
    truck_id: Mapped[int] = mapped_column(ForeignKey("workload_trucks.id"))
    stowed: Mapped[int] = mapped_column(default=0)
    unloaded: Mapped[int] = mapped_column(default=0)

    @engine.action(concurrency_key=lambda crate: f"hold/{crate.truck_id}")
    def stow(self, step: StepContext) -> None:
        intervals.opened(step)
        self.stowed += 1

    @engine.action(concurrency_key=lambda crate: f"hold/{crate.truck_id}")
    def unload(self, step: StepContext) -> None:
        intervals.opened(step)
        self.unloaded += 1


intervals.close_after((Truck, "deliver"), (Truck, "inspect"), (Crate, "stow"), (Crate, "unload"))
