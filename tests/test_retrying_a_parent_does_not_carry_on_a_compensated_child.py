"""Retrying a parent whose failed child compensated never reopens that child where it
stopped (its completed steps were undone): the retry is refused, naming the compensated
child, and nothing changes."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import StepContext, commands, testing
from engine.models import Action
from tests.compensation_scenarios import order_that_fails_to_ship_once
from tests.domain import Car


def test_retrying_a_parent_does_not_carry_on_a_compensated_child(session: Session, car: Car) -> None:
    # Given a trip whose order paid, failed to ship and was compensated (refunded)
    journal: list[str] = []
    order_that_fails_to_ship_once(journal)
    trip = engine.define(Car, "trip")

    @trip.step
    def book(car: Car, step: StepContext) -> None:
        step.do("order")

    with testing.handle_exceptions():
        action = engine.now(car, "trip")
        testing.drain()
    session.refresh(action)
    assert (action.status, journal) == ("failed", ["paid", "refund"])

    # When an operator retries the trip
    result = commands.retry(action.id)
    testing.drain()

    # Then it is refused, naming the compensated order, and nothing was shipped unpaid
    order_id = session.scalars(select(Action.id).where(Action.name == "order")).one()
    assert (result.ok, result.reason, result.action_id) == (False, "compensated", order_id)
    assert journal == ["paid", "refund"]
    session.expire_all()
    assert {a.name: a.status for a in session.scalars(select(Action))}["trip"] == "failed"
