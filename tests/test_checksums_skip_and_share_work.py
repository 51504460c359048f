"""Given actions with checksums, when the same work is asked for again, it is shared while
it runs and skipped once it has succeeded; starting other work under the key forgets the
last success.

Spec §8 cases 37-46 (test/models/stepped/action_checksums_test.rb). Setup as in Stepped:
``visit`` has ``checksum { location }`` and one step ``do :change_location, location``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

import engine
from engine import testing
from engine.models import Achievement, Step
from tests.conftest import Counts
from tests.domain import Car

NOTHING = {"actions": 0, "steps": 0, "performances": 0, "achievements": 0}


@pytest.fixture(autouse=True)
def visit(database: Engine) -> engine.Definition:
    visit = engine.define(Car, "visit", checksum=lambda car, location: location)

    @visit.step
    def go(car: Car, step: engine.StepContext, location: str) -> None:
        step.do("change_location", location)

    return visit


def see_committed_work(session: Session) -> None:
    """End the test session's transaction (SQLite reads from its snapshot until then) and
    expire what it holds, so the jobs' commits become visible."""
    session.commit()
    session.expire_all()


def last_achievement(session: Session) -> Achievement | None:
    return session.scalars(select(Achievement).order_by(Achievement.id.desc())).first()


def achieved(session: Session, checksum_key: str, value: Any) -> bool:
    """Whether an achievement row holds ``value``'s checksum under ``checksum_key`` (by
    content: SQLite may give a new row the id of a deleted one)."""
    found = session.scalar(
        select(Achievement.id).where(
            Achievement.checksum_key == checksum_key, Achievement.checksum == engine.checksum(value)
        )
    )
    return found is not None


def seed_achievement(session: Session, checksum_key: str, value: Any) -> Achievement:
    checksum = engine.checksum(value)
    assert checksum is not None
    seeded = Achievement(checksum_key=checksum_key, checksum=checksum)
    session.add(seeded)
    session.commit()
    return seeded


def new_messages() -> Callable[[testing.Enqueued], bool]:
    """Matches the messages enqueued from now on (Rails' block-form ``perform_enqueued_jobs``
    performs only the jobs enqueued inside its block)."""
    queued_before = {queued.message.message_id for queued in testing.enqueued()}
    return lambda queued: queued.message.message_id not in queued_before


def test_the_module_checksum_is_the_sha256_of_compact_json() -> None:
    """Spec §8 case 37: module checksum (the two vectors of spec §1.4)."""
    assert engine.checksum(25) == "b7a56873cd771f2c446d369b649430b65a756ba278ff97ec81bb6f55b2e73569"
    assert engine.checksum(["a", "b"]) == "0473ef2dc0d324ab659d3580c1134e9d812035905c4781fdd6d529b0c6860e13"


def test_the_module_checksum_of_none_is_none() -> None:
    """Spec §8 case 38: module checksum with nil input is nil."""
    assert engine.checksum(None) is None


def test_the_default_checksum_key_is_the_tenancy_key(session: Session, car: Car) -> None:
    """Spec §8 case 39: default checksum_key. Stepped reads the key ``apply_definition``
    computes on an unsaved action; we have no separate step for that, so the test invokes
    the action and reads the key of the admitted action."""
    action = engine.now(car, "visit", "London")

    assert action.checksum_key == f"Car/{car.id}/visit"


def test_a_custom_checksum_key_can_be_a_string(session: Session, car: Car) -> None:
    """Spec §8 case 40: custom checksum_key as string. Stepped's redefined ``visit`` has no
    steps and Car has no ``visit`` method (``apply_definition`` never runs it); ours is
    invoked, so it gets an empty body."""
    engine.define(Car, "visit", lambda car, *arguments: None, checksum_key=lambda car, *arguments: "custom")

    action = engine.now(car, "visit")

    assert action.checksum_key == "custom"


def test_a_custom_checksum_key_can_be_a_list_joined_with_slashes(session: Session, car: Car) -> None:
    """Spec §8 case 41: custom checksum_key as array (an empty body, as in case 40)."""
    engine.define(
        Car, "visit", lambda car, *arguments: None, checksum_key=lambda car, *arguments: ["Car", "visit"]
    )

    action = engine.now(car, "visit")

    assert action.checksum_key == "Car/visit"


def test_a_performing_action_is_reused_when_its_checksum_matches(
    session: Session, car: Car, counts: Counts
) -> None:
    """Spec §8 case 42: performing action is reused if checksum matches."""
    # When the car visits London
    first = engine.now(car, "visit", "London")

    # Then the visit is performing, with London's checksum under the car's visit key
    assert counts.delta() == {"actions": 1, "steps": 1, "performances": 1, "achievements": 0}
    assert isinstance(first, engine.Action)
    assert first.status == "performing"
    assert first.checksum == engine.checksum("London")
    assert first.checksum_key == f"Car/{car.id}/visit"

    # When it is asked to visit London again while the first visit runs
    again = engine.now(car, "visit", "London")

    # Then no action is created: the performing one is returned
    assert counts.delta() == NOTHING
    assert again.id == first.id

    # When everything finishes
    assert testing.drain() == 1

    # Then the visit succeeded and its success is recorded as an achievement
    assert counts.delta() == {"actions": 1, "steps": 1, "performances": -1, "achievements": 1}
    see_committed_work(session)
    assert first.status == "succeeded"
    assert car.location == "London"
    achievement = last_achievement(session)
    assert achievement is not None
    assert achievement.checksum_key == f"Car/{car.id}/visit"
    assert achievement.checksum == engine.checksum("London")

    # When it is asked to visit London once more
    skipped = engine.now(car, "visit", "London")

    # Then nothing runs: the invocation is skipped as succeeded
    assert counts.delta() == NOTHING
    assert skipped.status == "succeeded"

    # When it is asked to visit Berlin
    assert engine.now(car, "visit", "Berlin")

    # Then starting the visit forgets London's achievement at once
    assert not achieved(session, f"Car/{car.id}/visit", "London")
    assert testing.drain() == 1
    assert counts.delta() == {"actions": 2, "steps": 2, "performances": 0, "achievements": 0}

    # And after it finishes, Berlin's checksum is the achievement
    see_committed_work(session)
    assert car.location == "Berlin"
    achievement = last_achievement(session)
    assert achievement is not None
    assert achievement.checksum_key == f"Car/{car.id}/visit"
    assert achievement.checksum == engine.checksum("Berlin")


def test_an_action_without_checksum_deletes_the_achievement_of_its_key_when_it_starts(
    session: Session, car: Car, counts: Counts
) -> None:
    """Spec §8 case 43: completing action with nil checksum deletes Achievement if it
    exists for this action and achievement."""
    # Given an achievement under the car's drive key
    seed_achievement(session, f"Car/{car.id}/drive", "something")
    counts.delta()

    # When the car drives (an action with no checksum)
    action = engine.now(car, "drive", 1)

    # Then the achievement is gone
    assert counts.delta() == {"actions": 1, "steps": 1, "performances": 0, "achievements": -1}
    assert action.checksum is None
    see_committed_work(session)
    assert car.mileage == 1
    assert not achieved(session, f"Car/{car.id}/drive", "something")


def test_a_nested_action_matching_a_performing_checksum_shares_that_action_with_its_parent_step(
    session: Session, car: Car, counts: Counts
) -> None:
    """Spec §8 case 44: parent step of nested action matching and already performing
    checksum receives the matching action. Stepped invokes the trip inside a block-form
    ``perform_enqueued_jobs``, which performs inline only the jobs enqueued in the block:
    ours performs, after invoking the trip, only the messages the trip enqueued."""
    trip = engine.define(Car, "trip")

    @trip.step
    def to_paris(car: Car, step: engine.StepContext) -> None:
        step.do("visit", "Paris")

    @trip.step
    def to_amsterdam(car: Car, step: engine.StepContext) -> None:
        step.do("visit", "Amsterdam")

    # Given a visit to Paris that is performing, its child queued
    paris = engine.now(car, "visit", "Paris")
    assert paris.status == "performing"
    counts.delta()

    # When a trip whose first step visits Paris runs, with the jobs it enqueues
    enqueued_by_trip = new_messages()
    trip_action = engine.now(car, "trip")
    testing.drain(only=enqueued_by_trip)

    # Then the trip waits on the visit already performing instead of creating another
    assert counts.delta() == {"actions": 1, "steps": 1, "performances": 1, "achievements": 0}
    see_committed_work(session)
    assert trip_action.status == "performing"
    assert paris.status == "performing"
    step = session.scalars(select(Step).order_by(Step.id.desc())).first()
    assert step is not None
    assert step.action_id == trip_action.id
    assert step.status == "performing"
    assert [action.id for action in step.actions] == [paris.id]

    # When everything finishes
    assert testing.drain() == 3

    # Then the trip and the shared visit succeeded, and Amsterdam is the last achievement
    assert counts.delta() == {"actions": 3, "steps": 4, "performances": -2, "achievements": 1}
    see_committed_work(session)
    assert trip_action.status == "succeeded"
    assert paris.status == "succeeded"
    achievement = last_achievement(session)
    assert achievement is not None
    assert achievement.checksum_key == f"Car/{car.id}/visit"
    assert achievement.checksum == engine.checksum("Amsterdam")


def test_a_nested_action_already_achieved_completes_its_parent_step(
    session: Session, car: Car, counts: Counts
) -> None:
    """Spec §8 case 45: reuse of completed action by checksum as nested action completes
    the step."""
    # Given the car is in Paris, as recorded by an achievement of its visit key
    car.location = "Paris"
    session.commit()
    seeded = seed_achievement(session, f"Car/{car.id}/visit", "Paris")
    tour = engine.define(Car, "tour")

    @tour.step
    def to_paris(car: Car, step: engine.StepContext) -> None:
        step.do("visit", "Paris")

    counts.delta()

    # When a tour that visits Paris starts
    action = engine.now(car, "tour")

    # Then its step waits on one child
    assert counts.delta() == {"actions": 1, "steps": 1, "performances": 1, "achievements": 0}
    assert action.status == "performing"
    step = session.scalars(select(Step).order_by(Step.id.desc())).first()
    assert step is not None
    assert step.status == "performing"
    assert step.pending_actions_count == 1
    assert step.unsuccessful_actions_count == 0

    # When the child invocation is performed
    assert testing.perform_enqueued() == 1

    # Then it is skipped as already achieved, which completes the step and the tour
    assert counts.delta() == {"actions": 0, "steps": 0, "performances": -1, "achievements": 0}
    see_committed_work(session)
    assert action.status == "succeeded"
    assert step.status == "succeeded"
    assert step.pending_actions_count == 0
    assert step.unsuccessful_actions_count == 0
    assert seeded.checksum == engine.checksum("Paris")


def test_a_custom_checksum_key_shares_achievements_across_actors(
    session: Session, car: Car, counts: Counts
) -> None:
    """Spec §8 case 46: action reuse based on custom checksum_key."""
    # Given drive is redefined with a checksum_key shared by all cars
    engine.define(
        Car,
        "drive",
        checksum_key=lambda car, miles: ["Car", "drive"],
        checksum=lambda car, miles: miles,
    )

    # When the car drives 1
    assert engine.now(car, "drive", 1)

    # Then the success is recorded under the shared key
    assert counts.delta() == {"actions": 1, "steps": 1, "performances": 0, "achievements": 1}
    achievement = last_achievement(session)
    assert achievement is not None
    assert achievement.checksum_key == "Car/drive"
    assert achievement.checksum == engine.checksum(1)
    assert car.mileage == 1

    # When the same car, then another car, drive 1
    assert engine.now(car, "drive", 1).status == "succeeded"
    assert counts.delta() == NOTHING
    another = Car()
    session.add(another)
    session.commit()
    assert engine.now(another, "drive", 1).status == "succeeded"

    # Then both are skipped
    assert counts.delta() == NOTHING

    # When the car drives 2 (a different checksum)
    assert engine.now(car, "drive", 2)

    # Then the achievement is replaced by one for 2
    assert counts.delta() == {"actions": 1, "steps": 1, "performances": 0, "achievements": 0}
    assert not achieved(session, "Car/drive", 1)
    achievement = last_achievement(session)
    assert achievement is not None
    assert achievement.checksum_key == "Car/drive"
    assert achievement.checksum == engine.checksum(2)
    see_committed_work(session)
    assert car.mileage == 3
