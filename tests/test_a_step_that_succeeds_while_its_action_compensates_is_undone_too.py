"""A step still waiting on its children when its action timed out (and began compensating
at once) may succeed later: what it registered is undone too, before the action ends."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import StepContext, testing
from engine.models import Action, Compensation
from tests.compensation_scenarios import booking_that_charges_a_card
from tests.domain import Car


def test_a_step_that_succeeds_while_its_action_compensates_is_undone_too(session: Session, car: Car) -> None:
    # Given a booking that holds a seat, then charges a card (refunded if undone) past its timeout
    journal: list[str] = []
    booking_that_charges_a_card(journal, seat_released_by_hand=True)

    testing.freeze()
    action = engine.now(car, "booking")
    testing.drain()

    # When it times out (the seat's release starts), then the charge succeeds, then the release
    testing.travel(timedelta(seconds=6))
    testing.drain()
    assert engine.complete(car, "charge_card")
    testing.drain()
    assert engine.complete(car, "release_seat")
    testing.drain()

    # Then the charge is refunded as well, in the turn after the release, and the booking ends timed out
    session.refresh(action)
    assert (action.status, journal) == ("timed_out", ["refunded"])
    turns = session.execute(select(Compensation.name, Compensation.sequence).order_by(Compensation.sequence))
    assert [tuple(turn) for turn in turns] == [("release_seat", 1), ("refund", 2)]


def test_a_body_that_returns_after_its_action_was_cancelled_is_undone_too(session: Session, car: Car) -> None:
    # Given a booking whose charge body is still running when an operator cancels the booking
    journal: list[str] = []
    engine.define(Car, "release_seat", lambda car: None, outbound=True)
    engine.define(Car, "refund", lambda car: journal.append("refunded"))
    booking = engine.define(Car, "booking")

    @booking.step
    def hold(car: Car, step: StepContext) -> None:
        step.compensate("release_seat")

    @booking.step
    def pay(car: Car, step: StepContext) -> None:
        assert engine.commands.cancel(step.action.id, by="ops", audited=False).ok
        journal.append("charged")
        step.compensate("refund")

    # When the charge body returns, then the seat's release succeeds
    engine.later(car, "booking")
    session.commit()
    testing.drain()
    assert engine.complete(car, "release_seat")
    testing.drain()

    # Then the charge is refunded as well, and the booking ends cancelled
    action = session.scalars(select(Action).where(Action.name == "booking")).one()
    assert (action.status, journal) == ("cancelled", ["charged", "refunded"])


def test_a_step_that_succeeds_after_its_action_compensated_says_its_undo_needs_attention(
    session: Session, car: Car
) -> None:
    # Given a booking that timed out while its charge was pending, and compensated
    journal: list[str] = []
    booking_that_charges_a_card(journal, seat_released_by_hand=False)

    testing.freeze()
    action = engine.now(car, "booking")
    testing.drain()
    testing.travel(timedelta(seconds=6))
    testing.drain()
    session.refresh(action)
    assert (action.status, journal) == ("timed_out", ["released"])

    # When the charge succeeds after all
    assert engine.complete(car, "charge_card")
    testing.drain()

    # Then its refund is not lost silently: it failed, saying an operator must undo the charge
    session.expire_all()
    refund = session.scalars(select(Compensation).where(Compensation.name == "refund")).one()
    assert refund.status == "failed"
    assert refund.error_message is not None and "by hand" in refund.error_message
    assert session.get(Action, action.id).status == "timed_out"  # type: ignore[union-attr]
