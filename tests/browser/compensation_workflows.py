"""The browser tests' parcel, whose shipping an operator fails: it compensates, live.

``Parcel.send``: ``pay`` charges (``charge`` returns the payment) and registers
``refund(<the charge's result>)``; ``pack`` registers ``unpack``; ``ship`` waits for the
carrier (the outbound ``carrier``: Approve or Reject in the studio). Rejecting the carrier
fails the parcel, which then unpacks, then refunds, each taking ``undo_seconds`` in the
studio's process so that a poll of the page sees it running. Seeded: one parcel waiting
for its carrier. The models have their own declarative base: seeding makes their table.
"""

from __future__ import annotations

import os
import time
from typing import Any

from sqlalchemy import String
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

import engine
from engine import action

#: How long each compensation takes in the studio's process (the page polls every 3 s).
undo_seconds = float(os.environ.get("STEPWISE_BROWSER_UNDO_SECONDS", "4.0"))


class Base(DeclarativeBase):
    pass


class Parcel(engine.Actor, Base):
    __tablename__ = "browser_parcels"

    id: Mapped[int] = mapped_column(primary_key=True)
    customer: Mapped[str] = mapped_column(String(40))
    paid: Mapped[bool] = mapped_column(default=False)
    packed: Mapped[bool] = mapped_column(default=False)

    @action
    def send(self, step: Any) -> None:
        step.do("charge")
        step.compensate("refund", step.child_result("charge"))

    @send.step
    def pack(self, step: Any) -> None:
        self.packed = True
        step.compensate("unpack")

    @send.step
    def ship(self, step: Any) -> None:
        step.do("carrier")

    def charge(self) -> dict[str, str]:
        self.paid = True
        return {"payment": f"pay-{self.id}"}

    def refund(self, payment: dict[str, str]) -> dict[str, str]:
        time.sleep(undo_seconds)
        self.paid = False
        return {"refunded": payment["payment"]}

    def unpack(self) -> None:
        time.sleep(undo_seconds)
        self.packed = False

    @action(outbound=True)
    def carrier(self) -> None:
        """Waits for the carrier: Approve or Reject in the studio."""


def seed(sa_engine: Engine, session: Session, start: Any) -> dict[str, Any]:
    """Make the table and a parcel waiting for its carrier; the ids the tests use."""
    Base.metadata.create_all(sa_engine)
    parcel = Parcel(customer="ada")
    sent = start(parcel, "send")
    return {"parcel": sent, "parcel_carrier": start.root(parcel, "carrier")}
