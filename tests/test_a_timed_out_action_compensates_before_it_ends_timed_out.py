"""An action that times out with compensations registered compensates first, then ends
``timed_out`` (its timeout's cause on the "compensating" event)."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import StepContext, testing
from engine.models import ActionEvent
from tests.domain import Car


def test_a_timed_out_action_runs_its_compensations_then_ends_timed_out(session: Session, car: Car) -> None:
    # Given a booking that holds a seat, then waits longer than its timeout for a payment
    journal: list[str] = []
    engine.define(Car, "release_seat", lambda car: journal.append("released"))
    engine.define(Car, "await_payment", lambda car: None, outbound=True)
    booking = engine.define(Car, "booking", timeout=timedelta(seconds=5))

    @booking.step
    def hold(car: Car, step: StepContext) -> None:
        step.compensate("release_seat")

    @booking.step
    def pay(car: Car, step: StepContext) -> None:
        step.do("await_payment")

    testing.freeze()
    action = engine.now(car, "booking")
    testing.drain()

    # When its timeout passes
    testing.travel(timedelta(seconds=6))
    testing.drain()

    # Then the seat is released, and the booking ends timed out, compensated
    session.refresh(action)
    assert (action.status, journal) == ("timed_out", ["released"])
    compensating = session.scalars(
        select(ActionEvent).where(ActionEvent.action_id == action.id, ActionEvent.event == "compensating")
    ).one()
    assert (compensating.cause, compensating.data["status"]) == ("timeout", "timed_out")
