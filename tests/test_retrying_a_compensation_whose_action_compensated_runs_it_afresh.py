"""A failed compensation whose compensating action itself compensated (its own completed
steps were undone) is retried afresh, as a new compensating action from its first step,
never carried on where it stopped."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import StepContext, commands, testing
from engine.models import Action
from tests.domain import Car


def test_retrying_a_compensation_whose_action_compensated_runs_it_afresh(session: Session, car: Car) -> None:
    # Given an order whose refund (locks the card, then pays back) fails once and unlocks the card
    journal: list[str] = []
    tries = {"pay_back": 0}
    engine.define(Car, "unlock_card", lambda car: journal.append("unlock"))
    engine.define(Car, "ship", Car.breakdown)
    refund = engine.define(Car, "refund")

    @refund.step
    def lock_card(car: Car, step: StepContext) -> None:
        journal.append("lock")
        step.compensate("unlock_card")

    @refund.step
    def pay_back(car: Car, step: StepContext) -> None:
        tries["pay_back"] += 1
        if tries["pay_back"] == 1:
            raise RuntimeError("the bank is down")
        journal.append("paid back")

    order = engine.define(Car, "order")

    @order.step
    def pay(car: Car, step: StepContext) -> None:
        step.compensate("refund")

    @order.step
    def deliver(car: Car, step: StepContext) -> None:
        step.do("ship")

    with testing.handle_exceptions():
        action = engine.now(car, "order")
        testing.drain()
    session.refresh(action)
    assert (action.status, journal) == ("compensating", ["lock", "unlock"])

    # When an operator retries the order's failed compensation
    assert commands.retry(action.id, by="ops")
    testing.drain()

    # Then the refund runs again from its first step (the card locked again), and the order ends failed
    assert journal == ["lock", "unlock", "lock", "paid back"]
    session.expire_all()
    assert session.get(Action, action.id).status == "failed"  # type: ignore[union-attr]
    assert len(session.scalars(select(Action).where(Action.name == "refund")).all()) == 2
