"""An operator skips a failed leaf: it completes as succeeded with her note, the steps
waiting on it carry on, and the command is audited. Only a leaf: an action that failed
because of an action below it is refused, naming that one. A skip grants no achievement.

Not a spec case: operator commands are ours (issue 12, "Retry and skip").
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import StepContext, commands, testing
from engine.models import Achievement, Action, ActionEvent, AuditEntry
from tests.domain import Car


def status_of(session: Session, action_id: int) -> str:
    session.expire_all()
    return session.scalars(select(Action.status).where(Action.id == action_id)).one()


def trip_with_a_broken_leg(calls: dict[str, int], *, checksum: bool = False) -> None:
    """trip: start (does "leg"), arrive (goes home). leg: first, a step that fails, drive 7."""
    options = {"checksum": lambda car: "leg"} if checksum else {}
    leg = engine.define(Car, "leg", **options)

    @leg.step
    def first(car: Car, step: StepContext) -> None:
        calls["first"] += 1

    @leg.step
    def second(car: Car, step: StepContext) -> None:
        calls["second"] += 1
        raise RuntimeError("flat tyre")

    @leg.step
    def third(car: Car, step: StepContext) -> None:
        car.drive(7)

    trip = engine.define(Car, "trip")

    @trip.step
    def start(car: Car, step: StepContext) -> None:
        step.do("leg")

    @trip.step
    def arrive(car: Car, step: StepContext) -> None:
        car.change_location("home")


def failed_trip(session: Session, car: Car, **options: bool) -> tuple[Action, Action, dict[str, int]]:
    calls = {"first": 0, "second": 0}
    trip_with_a_broken_leg(calls, **options)
    with testing.handle_exceptions():
        root = engine.now(car, "trip")
        testing.drain()
    leg = session.scalars(select(Action).where(Action.name == "leg")).one()
    assert (status_of(session, root.id), status_of(session, leg.id)) == ("failed", "failed")
    return root, leg, calls


def test_a_skipped_leaf_succeeds_and_its_parent_carries_on(session: Session, car: Car) -> None:
    # Given a trip that failed because its leg's second step failed
    root, leg, calls = failed_trip(session, car)

    # When an operator skips the leg with a note
    result = commands.skip(leg.id, by="olga", note="towed home instead")
    testing.drain()

    # Then the leg succeeded without running again, and the trip went on to arrive home
    assert (result.ok, result.reason) == (True, "skipped")
    assert (status_of(session, leg.id), status_of(session, root.id)) == ("succeeded", "succeeded")
    assert calls == {"first": 1, "second": 1}
    session.refresh(car)
    assert (car.location, car.mileage) == ("home", 0)  # the leg's remaining step never ran
    # and its history and the audit say who skipped it and why
    skipped = session.scalars(select(ActionEvent).where(ActionEvent.event == "skipped")).one()
    assert (skipped.action_id, skipped.by, skipped.data) == (
        leg.id,
        "olga",
        {"note": "towed home instead", "was": "failed"},
    )
    completed = session.scalars(
        select(ActionEvent)
        .where(ActionEvent.event == "completed", ActionEvent.action_id == leg.id)
        .order_by(ActionEvent.id)
    ).all()
    assert completed[-1].data == {"status": "succeeded", "note": "towed home instead"}
    entry = session.scalars(select(AuditEntry)).one()
    assert (entry.command, entry.target, entry.by, entry.reason, entry.result) == (
        "skip",
        f"action:{leg.id}",
        "olga",
        "towed home instead",
        "skipped",
    )


def test_an_action_that_failed_because_of_a_child_is_not_a_leaf(session: Session, car: Car) -> None:
    # Given a trip that failed because of its leg
    root, leg, _ = failed_trip(session, car)

    # When an operator tries to skip the trip
    result = commands.skip(root.id, by="olga")

    # Then nothing changes, and the answer names the failed leg to skip instead
    assert (result.ok, result.reason, result.action_id) == (False, "not_a_leaf", leg.id)
    assert status_of(session, root.id) == "failed"
    entry = session.scalars(select(AuditEntry)).one()
    assert (entry.command, entry.result, entry.data) == ("skip", "not_a_leaf", {"failed_child": leg.id})


def test_only_a_failed_action_can_be_skipped(session: Session, car: Car) -> None:
    engine.define(Car, "drive")
    done = engine.now(car, "drive", 3)
    assert commands.skip(done.id, by="olga").reason == "not_failed"
    assert commands.skip(10_000, by="olga").reason == "not_found"
    assert status_of(session, done.id) == "succeeded"


def test_a_parent_with_another_failed_child_fails_again(session: Session, car: Car) -> None:
    # Given a trip whose step started two legs that both failed
    engine.define(Car, "leg", Car.breakdown)
    trip = engine.define(Car, "trip")

    @trip.step
    def start(car: Car, step: StepContext) -> None:
        step.do("leg")
        step.do("leg")

    with testing.handle_exceptions():
        root = engine.now(car, "trip")
        testing.drain()
    first, second = session.scalars(select(Action.id).where(Action.name == "leg").order_by(Action.id))

    # When one leg is skipped
    assert commands.skip(first, by="olga")
    testing.drain()

    # Then the trip fails again, because of the other one
    assert (status_of(session, first), status_of(session, second)) == ("succeeded", "failed")
    assert status_of(session, root.id) == "failed"
    # and skipping the other one lets it succeed
    assert commands.skip(second, by="olga")
    testing.drain()
    assert status_of(session, root.id) == "succeeded"


def test_a_skip_grants_no_achievement(session: Session, car: Car) -> None:
    _, leg, _ = failed_trip(session, car, checksum=True)
    assert commands.skip(leg.id, by="olga")
    testing.drain()
    assert status_of(session, leg.id) == "succeeded"
    assert session.scalars(select(Achievement)).all() == []
