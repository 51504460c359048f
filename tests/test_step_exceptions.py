"""Given a step body that raises, when the error is handled, then the step fails at once:
none of the children it started before the error is invoked, and the action fails."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import testing
from engine.models import Action, Step
from tests.conftest import Counts
from tests.domain import Car


def test_an_exception_in_a_step_body_invokes_none_of_that_steps_actions(
    session: Session, car: Car, counts: Counts
) -> None:
    """Spec §8 case 21: no admission message is queued for the ``honk`` started before the
    error (Stepped: no ActionJob enqueued). The error is stored on the action's row
    (DESIGN invariant 8)."""
    # Given a step that starts a honk, breaks down, then would honk twice more
    breakdown_wrapped = engine.define(Car, "breakdown_wrapped")

    @breakdown_wrapped.step
    def wrapped(car: Car, step: engine.StepContext) -> None:
        step.do("honk")
        car.breakdown()
        step.do("honk")
        car.honk()

    with testing.handle_exceptions():
        # When it is performed with exceptions handled
        assert engine.now(car, "breakdown_wrapped")

        # Then one action and one step were created, no lane is left, nothing is queued
        delta = counts.delta()
        assert (delta["actions"], delta["steps"], delta["performances"]) == (+1, +1, 0)
        assert testing.enqueued("stepwise.admit") == []

        # And the step failed, waiting on nothing
        step = session.scalars(
            select(Step).order_by(Step.id.desc()).limit(1).execution_options(populate_existing=True)
        ).one()
        assert step.status == "failed"
        assert step.started_at is not None
        assert step.completed_at is not None
        assert step.pending_actions_count == 0
        assert step.unsuccessful_actions_count == 0

        # And the action failed, keeping the error
        action = session.scalars(
            select(Action).order_by(Action.id.desc()).limit(1).execution_options(populate_existing=True)
        ).one()
        assert action.status == "failed"
        assert action.started_at is not None
        assert action.completed_at is not None
        assert action.error_class == "builtins.RuntimeError"
        assert action.error_message == "breakdown"

        session.refresh(car)
        assert car.honks == 0
