"""A batch of conclusions (engine/batch_conclusion.py) keeps each body's own: the
children it started, in the order it asked for them, admitted by its own unit, and history
events with the time the batch wrote their rows."""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import batch_conclusion, broker, config, db, status
from engine.group_commit import Unit
from engine.models import Action, ActionEvent, Invocation, Step
from engine.step_context import StepContext
from tests.conclusion_batches import bodies_of, declare
from tests.domain import Car


@pytest.mark.postgresql_only
def test_each_body_of_a_batch_gets_its_own_children_in_the_order_it_asked_for_them(
    session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a worker that admits children where they were started (engine.testing sends
    # them to the broker), and three cars whose rounds ran, each starting washes in bays
    # of its own, out of order
    monkeypatch.setattr(config, "admit_children_here", True)
    declare()
    rounds = engine.define(Car, "rounds")

    @rounds.step
    def go_round(car: Car, step: StepContext) -> None:
        for bay in (3, 1, 2):
            step.do("wash", car.id * 10 + bay)

    cars, ran = bodies_of(session, "rounds", 3)

    # When they are concluded in one batch
    units = [Unit(None, batch_conclusion.conclude_all, item) for item in ran]
    with db.transaction() as batch:
        batch_conclusion.conclude_all(batch, units)
    for unit in units:  # after the commit, as the group commit runs them
        for callback in unit.after_commit:
            broker.run_callback(callback)

    # Then each body's unit admits its own children, whose ids follow the order it asked in,
    # and its history names them
    session.expire_all()
    for car, (step_id, _), unit in zip(cars, ran, units, strict=True):
        children = session.scalars(
            select(Invocation).where(Invocation.parent_step_id == step_id).order_by(Invocation.id)
        ).all()
        assert [child.arguments_json for child in children] == [[car.id * 10 + bay] for bay in (3, 1, 2)]
        assert unit.admissions == [child.id for child in children]
        event_of_step = (ActionEvent.step_id == step_id, ActionEvent.event == "children_spawned")
        spawned = session.scalars(select(ActionEvent.data).where(*event_of_step)).one()
        assert spawned["invocations"] == [child.id for child in children]


@pytest.mark.postgresql_only
def test_the_events_of_a_batch_bear_the_time_its_rows_were_written(session: Session) -> None:
    """Actions founded, and steps concluded, by a batch: their events have the rows' own
    time (the batch reads the clock once for them all), not the clock read again each."""
    engine.define(Car, "polish", lambda car: "shiny")
    _, ran = bodies_of(session, "polish", 2)
    with db.transaction() as batch:
        batch_conclusion.conclude_all(
            batch, [Unit(None, batch_conclusion.conclude_all, item) for item in ran]
        )

    session.expire_all()
    for action in session.scalars(select(Action)):
        step = session.scalars(select(Step).where(Step.action_id == action.id)).one()
        at = {
            event.event: event.at
            for event in session.scalars(select(ActionEvent).filter_by(action_id=action.id))
        }
        assert action.status == status.SUCCEEDED
        assert at["admitted"] == at["started"] == at["step_started"] == action.started_at
        assert at["step_concluded"] == at["completed"] == step.completed_at == action.completed_at
