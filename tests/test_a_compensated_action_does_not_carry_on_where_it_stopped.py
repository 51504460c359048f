"""Once an action compensated, the work of its completed steps is undone: an operator's
retry of it is refused ("compensated"), and a retried child no longer reopens it, so it
never carries on past steps whose work was undone. An action without compensations is
retried as before."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import StepContext, commands, testing
from engine.models import Action
from tests.compensation_scenarios import order_that_fails_to_ship_once
from tests.domain import Car


def test_a_compensated_action_and_its_ancestor_chain_stay_failed(session: Session, car: Car) -> None:
    # Given an order that paid, then failed to ship, and was compensated (refunded)
    journal: list[str] = []
    order = order_that_fails_to_ship_once(journal)

    @order.step
    def thank(car: Car, step: StepContext) -> None:
        journal.append("thanks")

    with testing.handle_exceptions():
        action = engine.now(car, "order")
        testing.drain()
    session.refresh(action)
    assert (action.status, journal) == ("failed", ["paid", "refund"])

    # When an operator retries the order
    refused = commands.retry(action.id)

    # Then it is refused, saying why
    assert (refused.ok, refused.reason) == (False, "compensated")

    # When the operator retries the failed shipment instead
    ship_id = session.scalars(select(Action.id).where(Action.name == "ship")).one()
    assert commands.retry(ship_id)
    testing.drain()

    # Then the shipment runs, but the refunded order does not carry on
    session.expire_all()
    assert session.get(Action, ship_id).status == "succeeded"  # type: ignore[union-attr]
    assert session.get(Action, action.id).status == "failed"  # type: ignore[union-attr]
    assert journal == ["paid", "refund", "shipped"]
