"""An action completed before its step body ran (a webhook beat the worker, a timeout, a
cancel) leaves no step open; an operator's retry runs that step after all."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import commands, testing
from engine.models import Action, Step
from tests.domain import Car


def test_an_outbound_action_completed_before_its_body_ran_closes_the_step(session: Session, car: Car) -> None:
    # Given an outbound action admitted by a worker whose step body has not run yet
    engine.define(Car, "paint", Car.change_location, outbound=True)
    engine.later(car, "paint", "red")
    session.commit()
    from engine import jobs
    from engine.admission import admit

    invocation_id = testing.enqueued("stepwise.admit")[0].args[0]
    with engine.new_session() as worker:
        admit(worker, invocation_id)
        worker.commit()  # the worker dies here, before running the body
    testing.setup()  # its follow-up messages are lost with it
    action = session.scalars(select(Action)).one()

    # When a webhook completes it first
    assert engine.complete_action(action.id)

    # Then its step is closed, and the sweeper has nothing to send again
    session.expire_all()
    step = session.scalars(select(Step)).one()
    assert (step.status, step.performed_at is None, step.completed_at is not None) == (
        "cancelled",
        True,
        True,
    )
    from engine import sweeper

    testing.travel(sweeper.GRACE * 2)
    assert sweeper.sweep(session).total == 0
    assert jobs.perform_step.fn(step.id) is None  # a late message does nothing
    session.refresh(car)
    assert car.location is None


def admitted_but_not_run(session: Session, car: Car) -> Action:
    """An outbound action admitted by a worker that died before running its step body."""
    from engine.admission import admit

    engine.define(Car, "paint", Car.change_location, outbound=True)
    engine.later(car, "paint", "red")
    session.commit()
    invocation_id = testing.enqueued("stepwise.admit")[0].args[0]
    with engine.new_session() as worker:
        admit(worker, invocation_id)
        worker.commit()
    testing.setup()  # its follow-up messages are lost with it
    return session.scalars(select(Action)).one()


def test_retrying_such_an_action_runs_the_step_it_never_ran(session: Session, car: Car) -> None:
    action = admitted_but_not_run(session, car)
    assert commands.cancel(action.id, by="ops")

    assert commands.retry(action.id, by="ops")
    testing.drain()

    session.expire_all()
    step = session.scalars(select(Step)).one()
    assert (step.status, step.attempt) == ("succeeded", 1)  # ran once
    assert session.get(Action, action.id).status == "performing"  # type: ignore[union-attr]
    session.refresh(car)
    assert car.location == "red"
    assert engine.complete_action(action.id)
