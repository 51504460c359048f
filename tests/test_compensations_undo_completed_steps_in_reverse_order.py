"""Compensation: when an action finally fails, the compensations its completed steps
registered run in reverse order (the last completed step's first), each a child action of
the action, one after the other; the action is ``compensating`` meanwhile (it keeps its
lane, its parent keeps waiting) and then ends ``failed`` with "compensated" in its history.
A compensation's arguments may be the results of the step's children."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import RetryPolicy, StepContext, testing
from engine.models import Action, ActionEvent, Compensation
from tests.domain import Car


def declare_order(journal: list[str], *, ship_fails: bool = True) -> None:
    """An order that reserves stock, charges a payment (whose id the refund needs), then
    ships; each undo writes to ``journal``."""
    engine.define(Car, "charge", lambda car, amount: {"payment_id": f"pay-{amount}"})
    engine.define(Car, "refund", lambda car, payment: journal.append(f"refund {payment['payment_id']}"))
    engine.define(Car, "release", lambda car, sku: journal.append(f"release {sku}"))

    def ship(car: Car) -> None:
        journal.append("ship")
        if ship_fails:
            raise RuntimeError("the carrier is down")

    engine.define(
        Car, "ship", ship, retry=RetryPolicy(max_attempts=2, jitter=0, initial_interval=timedelta(0))
    )
    order = engine.define(Car, "order")

    @order.step
    def reserve(car: Car, step: StepContext, amount: int) -> None:
        step.compensate("release", "tyre")

    @order.step
    def pay(car: Car, step: StepContext, amount: int) -> None:
        step.do("charge", amount)
        step.compensate("refund", step.child_result("charge"))

    @order.step
    def deliver(car: Car, step: StepContext, amount: int) -> None:
        step.do("ship")


def run(session: Session, car: Car, *args: Any) -> Action:
    invocation = engine.later(car, "order", *args)
    session.commit()
    testing.drain()
    session.refresh(invocation)
    action = session.get(Action, invocation.action_id)
    assert action is not None
    session.refresh(action)
    return action


def events(session: Session, action_id: int) -> list[str]:
    return list(
        session.scalars(
            select(ActionEvent.event).where(ActionEvent.action_id == action_id).order_by(ActionEvent.id)
        )
    )


def test_a_failed_action_runs_its_compensations_last_step_first_then_ends_failed(
    session: Session, car: Car
) -> None:
    # Given an order whose shipping fails after stock was reserved and the payment charged
    journal: list[str] = []
    declare_order(journal)

    # When it runs
    with testing.handle_exceptions():
        action = run(session, car, 40)

    # Then the payment is refunded (with the id the charge returned), then the stock
    # released, after shipping gave up, and the order ends failed
    assert journal == ["ship", "ship", "refund pay-40", "release tyre"]
    assert action.status == "failed"
    history = events(session, action.id)
    assert history.index("compensating") < history.index("compensated") < history.index("completed")
    assert history.count("compensation_started") == history.count("compensation_succeeded") == 2
    # And each compensation is a child action of the order, on a step of its own
    rows = session.scalars(select(Compensation).order_by(Compensation.sequence)).all()
    assert [(r.name, r.sequence, r.status) for r in rows] == [
        ("refund", 1, "succeeded"),
        ("release", 2, "succeeded"),
    ]
    children = [session.get(Action, r.invocation_id and _action_of(session, r.invocation_id)) for r in rows]
    assert [(c.name, c.status, c.root_id) for c in children if c is not None] == [
        ("refund", "succeeded", action.id),
        ("release", "succeeded", action.id),
    ]


def _action_of(session: Session, invocation_id: int) -> int | None:
    return session.scalar(select(engine.Invocation.action_id).where(engine.Invocation.id == invocation_id))


def test_an_action_that_succeeds_runs_no_compensation(session: Session, car: Car) -> None:
    # Given the same order whose shipping works
    journal: list[str] = []
    declare_order(journal, ship_fails=False)

    # When it runs
    action = run(session, car, 10)

    # Then nothing is undone; its compensations stay registered
    assert action.status == "succeeded"
    assert journal == ["ship"]
    assert action.compensations_count == 2
    assert set(session.scalars(select(Compensation.status))) == {"registered"}


def test_while_compensating_the_action_keeps_its_lane_and_its_parent_waits(
    session: Session, car: Car
) -> None:
    # Given an order inside a checkout, whose refund is an outbound action (a person
    # confirms it), and a second order queued in the same lane
    journal: list[str] = []
    declare_order(journal)
    engine.define(Car, "refund", lambda car, payment: None, outbound=True)
    engine.define(Car, "order2", lambda car: journal.append("second order"), concurrency_key="orders")
    engine.definition(Car, "order").concurrency_key = "orders"
    checkout = engine.define(Car, "checkout")

    @checkout.step
    def place(car: Car, step: StepContext) -> None:
        step.do("order", 5)

    @checkout.step
    def thank(car: Car, step: StepContext) -> None:
        journal.append("thanks")

    with testing.handle_exceptions():
        root = engine.later(car, "checkout")
        session.commit()
        testing.drain()
        engine.later(car, "order2")
        session.commit()
        testing.drain()

        # Then the order is compensating, waiting on its refund; the queued order waits
        # for the lane, and the checkout waits for the order
        order = session.scalars(select(Action).where(Action.name == "order")).one()
        assert order.status == "compensating"
        assert session.scalars(select(Action.status).where(Action.name == "order2")).one() == "pending"
        session.refresh(root)
        assert session.get(Action, root.action_id).status == "performing"  # type: ignore[union-attr]

        # When the refund completes
        assert engine.complete(car, "refund")
        testing.drain()

    # Then the order ends failed, the lane moves on, and the checkout fails after it
    session.expire_all()
    assert session.get(Action, order.id).status == "failed"  # type: ignore[union-attr]
    assert journal[-2:] == ["release tyre", "second order"]
    assert session.get(Action, root.action_id).status == "failed"  # type: ignore[union-attr]
    assert "thanks" not in journal


def test_a_failure_below_compensates_the_child_before_its_parent(session: Session, car: Car) -> None:
    # Given a holiday that books a flight, then takes an order that ships and fails
    journal: list[str] = []
    declare_order(journal)
    engine.define(Car, "cancel_flight", lambda car: journal.append("cancel flight"))
    holiday = engine.define(Car, "holiday")

    @holiday.step
    def fly(car: Car, step: StepContext) -> None:
        step.compensate("cancel_flight")

    @holiday.step
    def shop(car: Car, step: StepContext) -> None:
        step.do("order", 12)

    # When it runs
    with testing.handle_exceptions():
        invocation = engine.later(car, "holiday")
        session.commit()
        testing.drain()

    # Then the order undoes its steps first, then the holiday its own, and both end failed
    assert journal == ["ship", "ship", "refund pay-12", "release tyre", "cancel flight"]
    session.refresh(invocation)
    statuses = {name: state for name, state in session.execute(select(Action.name, Action.status))}
    assert statuses["holiday"] == statuses["order"] == "failed"
