"""Newer queued work supersedes older: when an action joins a lane, every pending action
in it (other than the lane's current one) becomes superseded, and the steps that waited
on it now wait on the newcomer. Same work already in the lane is reused instead.

Spec §8 cases 70-72 (test/models/stepped/action_superseding_test.rb). Beyond Stepped, a
superseded action's ``superseded_by_id`` names the action that replaced it.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import testing
from tests.action_helpers import lane_of
from tests.conftest import Counts
from tests.domain import Car

NOTHING = {"actions": 0, "steps": 0, "performances": 0, "achievements": 0}


def lane(session: Session, key: str) -> engine.Performance:
    session.expire_all()
    return session.scalars(select(engine.Performance).where(engine.Performance.concurrency_key == key)).one()


def lanes_with(session: Session, key: str) -> int:
    return len(
        session.scalars(select(engine.Performance).where(engine.Performance.concurrency_key == key)).all()
    )


def queued_admissions() -> int:
    return len(testing.enqueued("stepwise.admit"))


def test_a_newer_root_action_supersedes_the_queued_one(session: Session, car: Car, counts: Counts) -> None:
    """Spec §8 case 70: superseeding of root actions."""
    # Given visit changes the car's location in a child action
    visit = engine.define(Car, "visit")

    @visit.step
    def go(car: Car, step: engine.StepContext, location: str) -> None:
        step.do("change_location", location)

    key = f"Car/{car.id}/visit"

    # When a first visit is performed
    first = engine.now(car, "visit", "Bratislava")

    # Then it is performing in its lane
    assert counts.delta() == {"actions": 1, "steps": 1, "performances": 1, "achievements": 0}
    assert first.status == "performing"
    visits = lane(session, key)
    assert visits.action_id == first.id

    # When a second visit is invoked
    admissions = queued_admissions()
    second = engine.now(car, "visit", "Paris")

    # Then it queues in the same lane, running nothing
    assert counts.delta() == NOTHING | {"actions": 1}
    assert queued_admissions() == admissions
    assert second.status == "pending"
    assert lane_of(session, second) == visits.id

    # When a third visit is invoked
    third = engine.now(car, "visit", "Berlin")

    # Then it queues, and the second is superseded by it
    assert counts.delta() == NOTHING | {"actions": 1}
    assert queued_admissions() == admissions
    visits = lane(session, key)
    assert third.status == "pending"
    assert second.status == "superseded"
    assert second.superseded_by_id == third.id
    assert lane_of(session, third) == visits.id
    # Stepped keeps the superseded one in lane.actions (3) until the lane closes; here it
    # leaves the lane as it is superseded, so a lane that never drains stays small.
    assert len(visits.actions) == 2
    assert lane_of(session, second) is None

    # When the first visit's child is performed
    assert testing.perform_enqueued() == 1

    # Then the first succeeded and the third started (the second never runs)
    assert counts.delta() == {"actions": 1, "steps": 2, "performances": 0, "achievements": 0}
    assert queued_admissions() == 1
    visits = lane(session, key)
    session.refresh(car)
    assert first.status == "succeeded"
    assert car.location == "Bratislava"
    assert third.status == "performing"
    assert [a.id for a in visits.actions] == [third.id]
    assert visits.actions[0].name == "visit"

    # When the third visit's child is performed
    assert testing.perform_enqueued() == 1

    # Then the third succeeded and the lane is gone
    assert counts.delta() == {"actions": 1, "steps": 1, "performances": -1, "achievements": 0}
    assert queued_admissions() == 0
    session.expire_all()
    session.refresh(car)
    assert third.status == "succeeded"
    assert car.location == "Berlin"
    assert lanes_with(session, key) == 0


def test_a_superseded_nested_action_hands_its_parent_step_to_the_newer_one(
    session: Session, car: Car, counts: Counts
) -> None:
    """Spec §8 case 71: superseeding of nested actions adds new action under the step
    where action was superseded.

    Stepped runs ``rush_hour_visit_now`` inside block-form ``perform_enqueued_jobs``, which
    performs inline only the jobs enqueued within the block. We perform the messages
    enqueued by that call (the queued get_out_of_way admission), and leave the older
    queued message (the first get_out_of_way's drive) in the queue, as Stepped does."""
    # Given get_out_of_way drives the preceding car, and rush_hour_visit waits for the
    # preceding car to get out of the way before changing location
    get_out_of_way = engine.define(Car, "get_out_of_way")

    @get_out_of_way.step
    def drive_away(car: Car, step: engine.StepContext, miles: int) -> None:
        step.do("drive", miles)

    rush_hour_visit = engine.define(Car, "rush_hour_visit")

    @rush_hour_visit.step
    def wait_for_the_way(car: Car, step: engine.StepContext, preceding: Car, location: str) -> None:
        step.on(preceding, "get_out_of_way", 1)

    @rush_hour_visit.step
    def arrive(car: Car, step: engine.StepContext, preceding: Car, location: str) -> None:
        step.do("change_location", location)

    preceding = Car()
    session.add(preceding)
    session.commit()
    counts.delta()
    key = f"Car/{preceding.id}/get_out_of_way"

    # When the preceding car starts getting out of the way
    first = engine.now(preceding, "get_out_of_way", 20)

    # Then it performs alone in its lane
    assert counts.delta() == {"actions": 1, "steps": 1, "performances": 1, "achievements": 0}
    assert first.status == "performing"
    assert preceding.mileage == 0
    assert [a.id for a in lane(session, key).actions] == [first.id]

    # When the rush-hour visit is performed, with the jobs it enqueues
    earlier = {queued.message.message_id for queued in testing.enqueued()}
    rush_hour = engine.now(car, "rush_hour_visit", preceding, "Amsterdam")
    assert testing.perform_enqueued(only=lambda queued: queued.message.message_id not in earlier) == 1

    # Then its get_out_of_way queues behind the first one
    assert counts.delta() == {"actions": 2, "steps": 1, "performances": 1, "achievements": 0}
    session.refresh(rush_hour)
    session.refresh(first)
    session.refresh(preceding)
    assert rush_hour.status == "performing"
    assert first.status == "performing"
    assert preceding.mileage == 0
    _, second = session.scalars(
        select(engine.Action).where(engine.Action.name == "get_out_of_way").order_by(engine.Action.id)
    ).all()
    way = lane(session, key)
    assert second.arguments == [1]
    assert second.status == "pending"
    assert lane_of(session, second) == way.id
    assert len(way.actions) == 2
    assert way.action_id == first.id
    (step,) = rush_hour.steps
    assert step.status == "performing"

    # When the preceding car is asked to get out of the way again, as a root
    third = engine.now(preceding, "get_out_of_way", 300)

    # Then the newer one supersedes the queued one
    assert counts.delta() == NOTHING | {"actions": 1}
    session.refresh(preceding)
    assert preceding.mileage == 0
    way = lane(session, key)
    second = session.get_one(engine.Action, second.id)
    assert third.status == "pending"
    assert second.status == "superseded"
    assert second.superseded_by_id == third.id
    assert session.get_one(engine.Action, first.id).status == "performing"
    assert len(way.actions) == 2  # the superseded one left the lane (Stepped: 3)
    assert [a.id for a in way.actions if a.status == "pending"] == [third.id]
    # and the rush-hour step now waits on the newer one instead
    step = session.get_one(engine.Step, step.id)
    assert len(step.actions) == 2
    assert step.pending_actions_count == 1
    assert [a.id for a in step.actions if a.status == "superseded"] == [second.id]
    assert [a.id for a in step.actions if a.status == "pending"] == [third.id]

    # When everything queued is performed
    assert testing.drain() == 3

    # Then the superseded "1" never ran, and the rush-hour visit succeeded
    assert counts.delta() == {"actions": 3, "steps": 5, "performances": -2, "achievements": 0}
    session.expire_all()
    last_three = session.scalars(select(engine.Action).order_by(engine.Action.id.desc()).limit(3)).all()[::-1]
    assert [a.name for a in last_three] == ["drive", "drive", "change_location"]
    assert all(a.status == "succeeded" and lane_of(session, a) is None for a in last_three)
    rush_hour = session.get_one(engine.Action, rush_hour.id)
    assert rush_hour.status == "succeeded"
    assert lane_of(session, rush_hour) is None
    session.refresh(preceding)
    assert preceding.mileage == 320


def test_the_same_checksum_under_another_checksum_key_is_not_reused(
    session: Session, car: Car, counts: Counts
) -> None:
    """Spec §8 case 72: performing actions with same checksum and concurrency_key but
    different checksum_key."""
    # Given two actions sharing a lane and a checksum, under different checksum keys
    tiny_drive = engine.define(
        Car, "tiny_drive", concurrency_key="Car/drive", checksum=lambda car: 1, checksum_key="tiny_drive"
    )

    @tiny_drive.step
    def drive_a_mile(car: Car, step: engine.StepContext) -> None:
        step.do("drive", 1)

    short_drive = engine.define(
        Car, "short_drive", concurrency_key="Car/drive", checksum=lambda car: 1, checksum_key="short_drive"
    )

    @short_drive.step
    def drive_ten_miles(car: Car, step: engine.StepContext) -> None:
        step.do("drive", 10)

    # When tiny_drive is performed
    first = engine.now(car, "tiny_drive")

    # Then it performs in the shared lane
    assert first.status == "performing"
    drives = lane(session, "Car/drive")
    assert drives.action_id == first.id
    counts.delta()

    # When short_drive is invoked
    short = engine.now(car, "short_drive")

    # Then it queues instead of reusing tiny_drive
    assert counts.delta() == NOTHING | {"actions": 1}
    assert short.status == "pending"
    assert len(lane(session, "Car/drive").actions) == 2

    # When tiny_drive is invoked again
    again = engine.now(car, "tiny_drive")

    # Then the first tiny_drive is reused
    assert counts.delta() == NOTHING
    assert again.id == first.id

    # When all actions are performed
    testing.perform_actions(complete_outbound_with="succeeded")

    # Then short_drive ran after it
    delta = counts.delta()
    assert (delta["actions"], delta["steps"], delta["performances"]) == (2, 3, -1)
    session.refresh(short)
    assert short.status == "succeeded"
