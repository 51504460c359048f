"""A workload for real workers that compensates: each parcel charges (the charge returns
its payment), packs, then fails to ship; it then unpacks, then refunds that payment. Each
undo records itself in the transaction of its step (rolled back with it), so a test sees
exactly what committed.

Workers import it: ``dramatiq engine.jobs tests.integration.compensation_workload``.
"""

from __future__ import annotations

import time
from datetime import timedelta

from sqlalchemy import ForeignKey, String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, object_session

import engine
from engine import Actor, RetryPolicy, StepContext

#: How long each undo takes: long enough for a test to kill the workers in the middle.
UNDO_SECONDS = 0.3


class CompensationBase(DeclarativeBase):
    pass


class Undo(CompensationBase):
    __tablename__ = "workload_undos"

    id: Mapped[int] = mapped_column(primary_key=True)
    parcel_id: Mapped[int] = mapped_column(ForeignKey("workload_parcels.id"))
    what: Mapped[str] = mapped_column(String(100))


class Parcel(Actor, CompensationBase):
    # The chaos workload has a Parcel too: two classes under one actor type are refused.
    __actor_type__ = "CompensationParcel"
    __tablename__ = "workload_parcels"

    id: Mapped[int] = mapped_column(primary_key=True)

    @engine.action
    def send(self, step: StepContext) -> None:
        step.do("charge")
        step.compensate("refund", step.child_result("charge"))

    @send.step
    def pack(self, step: StepContext) -> None:
        step.compensate("unpack")

    @send.step
    def ship(self, step: StepContext) -> None:
        step.do("carrier")

    def charge(self) -> dict[str, str]:
        return {"payment": f"pay-{self.id}"}

    @engine.action(retry=RetryPolicy(max_attempts=2, initial_interval=timedelta(seconds=0.1), jitter=0))
    def carrier(self) -> None:
        raise RuntimeError(f"the carrier refused parcel {self.id}")

    def unpack(self) -> None:
        self._record("unpack")

    def refund(self, payment: dict[str, str]) -> None:
        self._record(f"refund {payment['payment']}")

    def _record(self, what: str) -> None:
        time.sleep(UNDO_SECONDS)
        session = object_session(self)
        assert session is not None
        session.add(Undo(parcel_id=self.id, what=what))
