"""On PostgreSQL a batch of conclusions (engine/batch_conclusion.py) takes one lock of its
steps, one of their lanes, one statement completing them and one concluding what waited on
them, whatever their number: six bodies cost the statements of one, and bodies that start
children insert them all in one statement."""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import batch_conclusion, db, status, step_body
from engine.group_commit import Unit
from engine.models import Action, Invocation, Performance, Step
from engine.step_context import StepContext
from tests.conclusion_batches import admit, bodies_of, declare, open_steps, run_body, step_of
from tests.domain import Car
from tests.statement_helpers import statements


@pytest.mark.postgresql_only
def test_a_batch_of_conclusions_takes_as_many_statements_for_six_as_for_one(session: Session) -> None:
    # Given a trip waiting on six washes whose bodies ran, and one more wash on its own
    declare()
    car = Car(id=1)
    session.add(car)
    session.commit()
    trip = engine.define(Car, "wash_six")

    @trip.step
    def go(car: Car, step: StepContext) -> None:
        for bay in range(1, 7):
            step.do("wash", bay)

    engine.later(car, "wash_six")
    engine.later(car, "wash", 7)
    session.commit()
    admit(list(session.scalars(select(Invocation.id))))
    go_id = session.scalars(select(Step.id).join(Action).where(Action.name == "wash_six")).one()
    with db.transaction() as own:
        step_body.perform_and_conclude(own, go_id)
    admit(list(session.scalars(select(Invocation.id).where(Invocation.parent_step_id == go_id))))
    ran = {
        step_of(session, step_id)[1][0]: (step_id, run_body(step_id)) for step_id in open_steps(session, car)
    }

    # When the six are concluded in one batch, and the seventh in a batch of its own
    with statements() as for_six, db.transaction() as batch:
        six = [Unit(None, batch_conclusion.conclude_all, ran[bay]) for bay in range(1, 7)]
        batch_conclusion.conclude_all(batch, six)
    with statements() as for_one, db.transaction() as batch:
        batch_conclusion.conclude_all(batch, [Unit(None, batch_conclusion.conclude_all, ran[7])])

    # Then the six took the statements of one, and the trip's completion they led to
    assert len(for_one) == 5, for_one  # steps, lanes, completion, waiters, history
    # the six's waiters conclude the trip's step, which completes the trip in 4 more: its
    # row read, its lane locked, its completion, its own waiters
    assert len(for_six) == len(for_one) + 4, for_six
    session.expire_all()
    washes = session.scalars(select(Action.status).where(Action.name == "wash")).all()
    assert washes == [status.SUCCEEDED] * 7
    assert session.scalars(select(Performance)).all() == []


@pytest.mark.postgresql_only
def test_bodies_that_start_children_take_as_many_statements_for_three_as_for_one(session: Session) -> None:
    # Given four cars' convoys whose bodies ran, each starting two washes
    declare()
    _, ran = bodies_of(session, "convoy", 4)

    # When three are concluded in one batch, and the fourth in a batch of its own
    with statements() as for_three, db.transaction() as batch:
        batch_conclusion.conclude_all(
            batch, [Unit(None, batch_conclusion.conclude_all, item) for item in ran[:3]]
        )
    with statements() as for_one, db.transaction() as batch:
        batch_conclusion.conclude_all(batch, [Unit(None, batch_conclusion.conclude_all, ran[3])])

    # Then the three took the statements of one: their steps locked, their children
    # inserted with their steps written, their history
    assert len(for_one) == 3, for_one
    assert len(for_three) == len(for_one), for_three
    session.expire_all()
    children = session.scalars(select(Invocation).where(Invocation.parent_step_id.is_not(None))).all()
    assert sorted((c.parent_step_id, c.arguments_json) for c in children) == sorted(
        (step_id, [bay]) for step_id, _ in ran for bay in (6, 7)
    )
    steps = session.scalars(select(Step).order_by(Step.id)).all()
    assert [(s.pending_actions_count, s.result, s.performed_at is not None) for s in steps] == [
        (2, "convoy", True)
    ] * 4
