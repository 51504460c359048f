"""Actions run their steps in order and wait for the children those steps start: an
undeclared actor method runs as a one-step action, a second invocation waits in the lane of
the first, and a step that starts nothing (blank actors) concludes at once.

Spec §8 cases 22, 23 and 32 (test/models/stepped/action_test.rb). Stepped's
``ActionJob.perform_now`` is ``engine.now``; its ``perform_enqueued_jobs(only: ActionJob)``
is ``testing.perform_enqueued()`` and ``perform_enqueued_jobs_recursively`` is
``testing.drain()``. Jobs commit in their own sessions, so ``reread(session)`` ends the test
session's snapshot and expires what it holds before the rows are read again.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import StepContext, testing
from engine.models import Action, Performance
from tests.action_helpers import lane_of, no_change, reread
from tests.conftest import Counts
from tests.domain import Car

T = datetime(2024, 12, 12)


def test_an_undeclared_actor_method_runs_as_a_one_step_action(
    session: Session, car: Car, counts: Counts
) -> None:
    """Spec §8 case 22: performing actor method without definition. The lane is created
    and destroyed within the call, so the Performance count does not change."""
    # Given a car whose drive method is not declared as an action
    assert engine.registry.find(Car, "drive") is None
    testing.freeze(T)

    # When drive is performed now
    action = engine.now(car, "drive", 4)

    # Then one action and one step were created, and the lane came and went
    assert counts.delta() == no_change(actions=1, steps=1)
    session.refresh(action)
    assert action.actor is car
    assert (action.actor_type, action.actor_id) == ("Car", str(car.id))
    assert action.name == "drive"
    assert action.checksum is None
    assert action.checksum_key == f"Car/{car.id}/drive"
    assert action.concurrency_key == f"Car/{car.id}/drive"
    assert action.status == "succeeded"
    assert action.current_step_index == 0
    assert action.started_at == T
    assert action.completed_at == T
    assert action.root is True
    assert car.mileage == 4


def test_an_action_with_steps_waits_for_its_children_and_queues_the_next_invocation(
    session: Session, car: Car, counts: Counts
) -> None:
    """Spec §8 case 23: perform with steps. Step 1 honks inline; step 2 starts honk and,
    through ``on [self, nil]``, drive; the succeeded callback parks the car in the garage.
    A second invocation waits in the same lane until the first one succeeds."""
    park = engine.define(Car, "park")

    @park.step
    def honk_inline(car: Car, step: StepContext, mileage: int) -> None:
        car.honk()

    @park.step
    def honk_and_drive(car: Car, step: StepContext, mileage: int) -> None:
        step.do("honk")
        step.on([car, None], "drive", mileage)

    @park.succeeded
    def into_the_garage(car: Car, action: Action, mileage: int) -> None:
        car.location = "garage"

    # When park(5) is performed now
    first = engine.now(car, "park", 5)

    # Then it performs its second step, which waits on the two children it queued
    assert counts.delta() == no_change(actions=1, steps=2, performances=1)
    assert len(testing.enqueued("stepwise.admit")) == 2
    assert first.status == "performing"
    assert first.arguments == [5]
    assert first.current_step_index == 1
    assert first.completed_at is None
    assert first.root is True

    lane = session.scalars(select(Performance)).one()
    lane_id = lane.id
    assert lane.concurrency_key == f"Car/{car.id}/park"
    assert lane.action_id == first.id
    assert [a.id for a in lane.actions] == [first.id]
    assert lane_of(session, first) == lane.id

    assert car.honks == 1
    assert len(first.steps) == 2
    step_one, step_two = first.steps
    assert step_one.definition_index == 0
    assert step_one.pending_actions_count == 0
    assert step_one.status == "succeeded"
    assert step_one.started_at is not None
    assert step_one.completed_at is not None
    assert step_two.definition_index == 1
    assert step_two.pending_actions_count == 2
    assert step_two.status == "performing"
    assert step_two.started_at is not None
    assert step_two.completed_at is None

    # When park(7) is performed now, with the first still performing
    second = engine.now(car, "park", 7)

    # Then it waits in the same lane, and queues nothing
    assert counts.delta() == no_change(actions=1)
    assert len(testing.enqueued("stepwise.admit")) == 2
    assert second.arguments == [7]
    assert second.status == "pending"
    session.refresh(lane)
    assert lane.concurrency_key == f"Car/{car.id}/park"
    assert lane.action_id == first.id
    assert [a.id for a in lane.actions] == [first.id, second.id]
    assert lane_of(session, second) == lane.id
    session.refresh(car)
    assert car.honks == 1

    # When the first park's two children are performed
    assert testing.perform_enqueued() == 2

    # Then the first park succeeds, and the second starts and queues its own children
    # (the children's two lanes were created and destroyed)
    assert counts.delta() == no_change(actions=2, steps=4)
    assert len(testing.enqueued("stepwise.admit")) == 2
    reread(session)
    assert first.current_step_index == 1
    step_two = first.steps[1]
    assert len(step_two.actions) == 2
    assert step_two.status == "succeeded"
    assert step_two.completed_at is not None
    for child in step_two.actions:
        assert child.status == "succeeded"
        assert child.completed_at is not None
        assert child.root is False
    assert first.status == "succeeded"
    assert first.completed_at is not None
    assert car.mileage == 5
    assert car.location == "garage"

    assert second.status == "performing"
    assert car.honks == 3
    assert session.scalars(select(Performance)).one().id == lane_id
    assert lane.concurrency_key == f"Car/{car.id}/park"

    # When the second park's two children are performed
    assert testing.perform_enqueued() == 2

    # Then it succeeds, nothing more is queued and its lane is gone
    assert counts.delta() == no_change(actions=2, steps=2, performances=-1)
    assert testing.enqueued("stepwise.admit") == []
    reread(session)
    assert second.status == "succeeded"
    assert car.mileage == 5 + 7
    assert session.scalars(select(Performance).where(Performance.id == lane_id)).first() is None


def test_an_action_on_blank_actors_completes_the_parent_step(
    session: Session, car: Car, counts: Counts
) -> None:
    """Spec §8 case 32: action on blank actor completes parent step. ``on`` with None, an
    empty list or a list of None starts nothing, so the step succeeds at once (``bar`` is
    not even a Car method: no actor means no lookup)."""
    foo = engine.define(Car, "foo")

    @foo.step
    def on_nobody(car: Car, step: StepContext) -> None:
        step.on(None, "bar")
        step.on([], "bar")
        step.on([None], "bar")

    # When it is performed now, and the queue is worked
    action = engine.now(car, "foo")
    assert testing.perform_enqueued() == 0

    # Then the action and its only step succeeded
    assert counts.delta() == no_change(actions=1, steps=1)
    reread(session)
    assert action.status == "succeeded"
    assert action.steps[0].status == "succeeded"
