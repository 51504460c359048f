"""The action page's recovery panel names each recovery step and the failure that led to it;
a compensation's step (no step of the definition: index -1) is never taken for one, even
when the failure that went unrecovered names the definition's last step."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from app.action import queries_attempts
from engine import StepContext, testing
from engine.compensation import STEP_INDEX
from engine.models import Action, Step
from engine.retry import RetryPolicy
from tests.domain import Car


class Declined(Exception):
    pass


def test_the_studio_never_takes_a_compensation_step_for_a_recovery_step(session: Session, car: Car) -> None:
    # Given an order whose charge recovers to its last step, which may run once only
    engine.define(Car, "release", lambda car: None)
    order = engine.define(Car, "order", retry=RetryPolicy(max_attempts=1))

    @order.step
    def reserve(car: Car, step: StepContext) -> None:
        step.compensate("release")

    @order.step(recover="retry_charge")
    def charge(car: Car, step: StepContext) -> None:
        raise Declined("card declined")

    @order.step(max_visits=1)
    def retry_charge(car: Car, step: StepContext) -> None:
        step.go_to("charge")

    # When the charge fails twice (the second time its recovery may not run again) and the order compensates
    with testing.handle_exceptions():
        engine.later(car, "order")
        session.commit()
        testing.drain()
    session.expire_all()
    action = session.scalars(select(Action).where(Action.name == "order")).one()
    assert action.status == "failed"
    steps = session.scalars(select(Step).where(Step.action_id == action.id)).all()
    [compensation_step] = [s for s in steps if s.definition_index == STEP_INDEX]

    # Then the panel shows the one recovery step, not the compensation's step
    recovered_from = queries_attempts.panel(session, action, steps)["recovered_from"]
    names = {s.id: s.definition_index for s in steps}
    assert [names[step_id] for step_id in recovered_from] == [2]
    assert compensation_step.id not in recovered_from
