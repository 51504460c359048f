"""Given actions whose concurrency_key is declared, when they are invoked, then the key
decides their lane: actions sharing a key queue behind each other, whatever their actor or
name, and a child may not wait for the lane its own ancestor holds.

Ported from Stepped's test/models/stepped/action_concurrency_key_test.rb (spec §8, cases
52-58). A Stepped key block ``concurrency_key { |*args| ... }`` is a callable
``fn(car, *args)`` here.
"""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import testing
from tests.action_helpers import lane_of
from tests.conftest import Counts
from tests.domain import Car


def is_admission(item: testing.Enqueued) -> bool:
    """Stepped's ``only: Stepped::ActionJob``: admission messages only."""
    return item.job == "stepwise.admit"


def reload(session: Session) -> None:
    """See what the jobs committed: end the session's read transaction (on SQLite it reads
    from the snapshot taken at its first read), then reload every object on next access."""
    session.commit()
    session.expire_all()


def last_action(session: Session) -> engine.Action:
    found = session.scalars(select(engine.Action).order_by(engine.Action.id.desc()).limit(1)).first()
    assert found is not None
    return found


def last_lane(session: Session) -> engine.Performance:
    found = session.scalars(
        select(engine.Performance).order_by(engine.Performance.id.desc()).limit(1)
    ).first()
    assert found is not None
    return found


def does_nothing(car: Car, step: engine.StepContext, *args: object) -> None:
    pass


def test_a_concurrency_key_can_be_a_plain_string(session: Session, car: Car) -> None:
    """Spec §8 case 52: concurrency_key defined as string.

    Stepped applies the definition to an unsaved action; we have no public
    ``apply_definition``, so the action is performed (with a step that does nothing) and
    its stored key is read."""
    # Given an action whose key block returns a plain string
    engine.define(Car, "drive_one_way_street", does_nothing, concurrency_key=lambda car: "just-a-string")

    # When it is invoked
    action = engine.now(car, "drive_one_way_street")

    # Then that string is its concurrency_key
    assert action.concurrency_key == "just-a-string"


@pytest.mark.parametrize("blank", [None, "", []], ids=["nil", "empty-string", "empty-list"])
def test_a_blank_concurrency_key_means_the_tenancy_key(session: Session, car: Car, blank: object) -> None:
    """Spec §8 case 53: concurrency_key defined as blank means to use default (tenancy_key).

    Stepped loops over nil, "" and [] in one test; each is a parameter here. The action is
    performed rather than only having its definition applied (see case 52)."""
    # Given an action whose key block returns a blank value
    engine.define(Car, "drive_one_way_street", does_nothing, concurrency_key=lambda car: blank)

    # When it is invoked
    action = engine.now(car, "drive_one_way_street")

    # Then its concurrency_key is the tenancy key
    assert action.concurrency_key == action.tenancy_key == f"Car/{car.id}/drive_one_way_street"


def test_actions_on_different_actors_sharing_a_concurrency_key_queue_up(
    session: Session, car: Car, counts: Counts
) -> None:
    """Spec §8 case 54: actions on different actors with custom concurrency keys that
    matches ensures they queue up."""
    # Given an action keyed by class and name only, so all cars share one lane
    one_way = engine.define(
        Car, "drive_one_way_street", concurrency_key=lambda car, *args: ["Car", "drive_one_way_street"]
    )

    @one_way.step
    def drive_through(car: Car, step: engine.StepContext, mileage: int) -> None:
        step.do("drive", mileage)

    first_car = car
    second_car = Car()
    session.add(second_car)
    session.commit()
    counts.delta()

    # When the first car drives the one-way street
    assert engine.now(first_car, "drive_one_way_street", 1)

    # Then it performs in a new lane
    assert counts.delta() == {"actions": 1, "steps": 1, "performances": 1, "achievements": 0}
    lane = last_lane(session)
    first_car_action = last_action(session)
    assert first_car_action.concurrency_key == "Car/drive_one_way_street"
    assert lane_of(session, first_car_action) == lane.id
    assert first_car_action.status == "performing"

    # When the second car drives it too
    assert engine.now(second_car, "drive_one_way_street", 2).status == "pending"

    # Then it waits in the same lane
    assert counts.delta() == {"actions": 1, "steps": 0, "performances": 0, "achievements": 0}
    second_car_action = last_action(session)
    assert second_car_action.concurrency_key == "Car/drive_one_way_street"
    assert lane_of(session, second_car_action) == lane.id
    assert second_car_action.status == "pending"

    # When the first car's drive is performed
    assert testing.perform_enqueued(is_admission) == 1

    # Then the first car is through and the second car's action performs
    assert counts.delta() == {"actions": 1, "steps": 2, "performances": 0, "achievements": 0}
    reload(session)
    assert first_car_action.status == "succeeded"
    assert first_car.mileage == 1
    assert second_car_action.status == "performing"

    # When the second car's drive is performed
    assert testing.perform_enqueued(is_admission) == 1

    # Then the second car is through and the lane is gone
    assert counts.delta() == {"actions": 1, "steps": 1, "performances": -1, "achievements": 0}
    reload(session)
    assert second_car_action.status == "succeeded"
    assert second_car.mileage == 2


def test_a_queued_action_can_be_cancelled_while_the_first_one_performs(
    session: Session, car: Car, counts: Counts
) -> None:
    """Spec §8 case 55: cancelling queued action attached to performance while the first
    one is performing. ``second_action.complete!(:cancelled)`` is
    ``engine.complete_action(second_action, "cancelled")``."""
    # Given an outbound drive performing and a second one queued behind it
    engine.define(Car, "drive", outbound=True)
    assert engine.now(car, "drive", 1).status == "performing"
    assert engine.now(car, "drive", 2).status == "pending"
    assert counts.delta()["performances"] == 1
    lane = last_lane(session)
    assert len(lane.actions) == 2
    first_action, second_action = lane.actions
    assert first_action.status == "performing"
    assert second_action.status == "pending"

    # When the queued one is cancelled
    assert engine.complete_action(second_action, "cancelled")

    # Then it leaves the lane, and the first keeps performing in it
    assert counts.delta()["performances"] == 0
    reload(session)
    assert second_action.status == "cancelled"
    assert lane_of(session, second_action) is None
    assert first_action.status == "performing"
    assert lane_of(session, first_action) == lane.id
    assert len(lane.actions) == 1

    # When the performing one is completed from outside
    assert engine.complete(car, "drive")

    # Then it succeeded and the lane is gone
    assert counts.delta()["performances"] == -1
    session.refresh(first_action)
    assert first_action.status == "succeeded"


def test_completing_from_outside_ignores_a_queued_action_sharing_the_lane(
    session: Session, car: Car, counts: Counts, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spec §8 case 56: same concurrency_key does not complete action that doesn't match
    actor or name. Stepped's ``outbound_complete`` returns nil; ours returns a falsy
    Completion whose reason is "not_found" (paint is queued, not current in a lane)."""
    # Given two outbound maintenance actions sharing one lane
    monkeypatch.setattr(Car, "recycle", lambda self: None, raising=False)
    monkeypatch.setattr(Car, "paint", lambda self: None, raising=False)
    engine.define(Car, "recycle", outbound=True, concurrency_key=lambda car: "Car/maintenance")
    engine.define(Car, "paint", outbound=True, concurrency_key=lambda car: "Car/maintenance")

    recycle_action = engine.now(car, "recycle")
    assert recycle_action.status == "performing"
    assert recycle_action.name == "recycle"
    assert engine.now(car, "paint").status == "pending"
    paint_action = last_action(session)
    assert paint_action.status == "pending"
    assert paint_action.name == "paint"
    counts.delta()

    # When the queued paint is completed from outside by actor and name
    completion = engine.complete(car, "paint")

    # Then nothing completes: recycle still performs and paint still waits
    assert not completion
    assert completion.reason == "not_found"
    assert counts.delta()["performances"] == 0
    reload(session)
    assert recycle_action.status == "performing"
    assert paint_action.status == "pending"


def test_a_descendant_cannot_wait_for_the_lane_its_ancestor_holds(
    session: Session, car: Car, counts: Counts
) -> None:
    """Spec §8 case 57: descendent action can't have the same concurrency_key as parent.

    The deadlocked drive is never admitted (DESIGN: deadlocked invocations are never
    actions), so only recycle and prepare_recycle are counted, as in Stepped."""
    # Given recycle, holding the maintenance lane, whose grandchild drive wants that lane
    recycle = engine.define(Car, "recycle", concurrency_key=lambda car: "Car/maintenance")

    @recycle.step
    def prepare(car: Car, step: engine.StepContext) -> None:
        step.do("prepare_recycle")

    prepare_recycle = engine.define(Car, "prepare_recycle")

    @prepare_recycle.step
    def drive_away(car: Car, step: engine.StepContext) -> None:
        step.do("drive", 1)

    engine.define(Car, "drive", concurrency_key=lambda car, *args: "Car/maintenance")

    with testing.handle_exceptions(engine.Deadlock):
        # When recycle is performed and its children run
        recycle_action = engine.now(car, "recycle")
        testing.drain(is_admission)

        # Then the drive deadlocks and is never admitted, and recycle fails
        assert counts.delta()["actions"] == 2
        reload(session)
        assert recycle_action.status == "failed"


def test_a_concurrency_key_can_use_the_action_arguments(session: Session, car: Car) -> None:
    """Spec §8 case 58: concurrency_key can use action arguments."""
    # Given an action keyed by its two arguments
    engine.define(Car, "fun", does_nothing, concurrency_key=lambda car, arg1, arg2: f"{arg1}-{arg2}")

    # When it is invoked with "foo" and "bar"
    action = engine.now(car, "fun", "foo", "bar")

    # Then its concurrency_key is built from them
    assert action.concurrency_key == "foo-bar"
