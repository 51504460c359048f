"""A step that declares only ``recover=`` keeps running when its message is delivered again
while its body runs (a broker's redelivery, the sweeper's resend): the attempt is not taken
for lost, not run twice, and its outcome stands."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

import engine
from engine import StepContext, durable, testing
from engine.models import Action
from tests.attempt_helpers import attempts
from tests.domain import Car


def test_a_redelivered_attempt_message_leaves_a_running_recoverable_body_alone(
    session: Session, car: Car
) -> None:
    # Given a charge with a recovery step, whose message is delivered again while it runs
    seen: list[Any] = []
    order = engine.define(Car, "order")

    @order.step(recover="refund")
    def charge(car: Car, step: StepContext) -> str:
        seen.append(f"charge {step.step.attempt}")
        if len(seen) == 1:
            durable.run(step.step.id)  # the redelivered stepwise.perform_attempt
        return "charged"

    @order.step
    def refund(car: Car, step: StepContext) -> None:
        seen.append(f"refund after {step.failure.outcome}" if step.failure else "refund (nothing failed)")

    # When it runs
    engine.later(car, "order")
    session.commit()
    testing.drain()

    # Then the body ran once, its one attempt succeeded, and the order succeeded without recovering
    assert seen == ["charge 1", "refund (nothing failed)"]
    session.expire_all()
    action = session.query(Action).one()
    charge_step = min(a.step_id for a in attempts(session, action.id))
    charges = [(a.attempt, a.outcome) for a in attempts(session, action.id) if a.step_id == charge_step]
    assert charges == [(1, "succeeded")]
    assert action.status == "succeeded"
