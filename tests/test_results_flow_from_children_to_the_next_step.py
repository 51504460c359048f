"""Results: an action's result is what its last step returned; the step after a step that
started children reads each child's status and result, in the order it requested them.
Actors, datetimes and decimals keep their type; a value that cannot be stored fails the
step with a message naming it."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy.orm import Session

import engine
from engine import testing
from engine.result import Child
from tests.domain import Car


def test_the_last_steps_return_value_is_the_actions_result(session: Session, car: Car) -> None:
    # Given a one-step action whose method returns a value
    engine.define(
        Car, "quote", lambda car, miles: {"price": Decimal("1.50") * miles, "at": datetime(2026, 1, 2)}
    )

    # When it runs
    action = engine.now(car, "quote", 10)

    # Then its result is the value, with its types kept
    session.refresh(action)
    assert action.status == "succeeded"
    assert engine.result_of(action) == {"price": Decimal("15.00"), "at": datetime(2026, 1, 2)}


def test_a_childs_result_is_read_by_the_next_step(session: Session, car: Car) -> None:
    # Given an order that charges, reserves and then ships with what both returned
    engine.define(Car, "charge", lambda car, amount: {"payment": f"pay-{amount}"})
    engine.define(Car, "reserve", lambda car, sku: {"sku": sku, "bin": 7})
    seen: list[list[Child]] = []
    order = engine.define(Car, "order")

    @order.step
    def pay_and_reserve(car: Car, step: engine.StepContext, amount: int) -> str:
        step.do("charge", amount)
        step.do("reserve", "tyre")
        return "requested"

    @order.step
    def ship(car: Car, step: engine.StepContext, amount: int) -> dict[str, Any]:
        seen.append(step.children)
        payment, stock = step.results
        return {"shipped": stock["sku"], "paid": payment["payment"], "before": step.previous_result}

    # When it runs to the end
    invocation = engine.later(car, "order", 40)
    session.commit()
    testing.drain()
    session.refresh(invocation)
    action = session.get(engine.Action, invocation.action_id)
    assert action is not None

    # Then the shipping step saw each child, in the order requested, and the order's
    # result is what shipping returned
    session.refresh(action)
    assert action.status == "succeeded"
    ((charge, reserve),) = seen
    assert (charge.name, charge.status, charge.result) == ("charge", "succeeded", {"payment": "pay-40"})
    assert (reserve.name, reserve.succeeded, reserve.result) == ("reserve", True, {"sku": "tyre", "bin": 7})
    assert engine.result_of(action) == {"shipped": "tyre", "paid": "pay-40", "before": "requested"}


def test_an_actor_returned_as_a_result_is_loaded_again(session: Session, car: Car) -> None:
    # Given an action returning its actor
    engine.define(Car, "myself", lambda car: car)

    # When it runs
    action = engine.now(car, "myself")

    # Then its result is the actor row
    session.refresh(action)
    assert engine.result_of(action) == car


def test_a_result_that_cannot_be_stored_fails_the_action_at_once_naming_it(
    session: Session, car: Car
) -> None:
    # Given an action returning an object that is not JSON, with retries to spare
    engine.define(Car, "leak", lambda car: object(), retry=5)

    # When it runs
    with engine.handling():
        action = engine.now(car, "leak")

    # Then it failed without retrying (it would fail the same way), and the message names
    # the value and says why
    session.refresh(action)
    assert action.status == "failed"
    assert [step.attempt for step in action.steps] == [1]
    assert "returned <object object" in (action.error_message or "")
    assert "cannot be its result" in (action.error_message or "")
