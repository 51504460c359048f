"""DESIGN.md's invariants 1-8, one test (or a few) named after each.

Each fixes a weakness of Stepped that the spec (§9.2) records; the docstrings say which.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

import engine
from engine import StepContext, testing
from engine.models import Achievement, Action, ActionEvent, Invocation, Performance, Step
from tests.conftest import Counts
from tests.domain import Car


def statuses(session: Session) -> dict[int, str]:
    session.expire_all()
    return {a.id: a.status for a in session.scalars(select(Action).order_by(Action.id))}


# --- 1 ---------------------------------------------------------------------------------


def test_invariant_1_the_database_refuses_a_second_performing_action_in_a_lane(
    session: Session, car: Car
) -> None:
    """Given a performing action and a queued one in one lane, when anything tries to
    mark the queued one performing too, the unique partial index refuses it."""
    engine.define(Car, "drive", outbound=True)
    first = engine.now(car, "drive", 1)
    second = engine.now(car, "drive", 2)
    assert (first.status, second.status) == ("performing", "pending")

    with pytest.raises(IntegrityError):
        session.execute(update(Action).where(Action.id == second.id).values(status="performing"))
        session.flush()
    session.rollback()


@pytest.mark.postgresql_only
def test_invariant_1_concurrent_admissions_to_one_new_lane_leave_one_performer(
    session: Session, database: Engine
) -> None:
    """Given 8 threads that each admit an action to the same, not yet existing lane at
    once (the lane-creation race of Stepped), then exactly one performs and the lane row
    is created once; the others queue behind it (and supersede each other)."""
    engine.define(Car, "paint", Car.change_location, outbound=True, concurrency_key="Car/maintenance")
    cars = [Car() for _ in range(8)]
    session.add_all(cars)
    session.commit()
    ids = [c.id for c in cars]
    barrier = threading.Barrier(len(ids))
    errors: list[BaseException] = []

    def admit(car_id: int) -> None:
        try:
            with engine.new_session() as own:
                mine = own.get(Car, car_id)
                barrier.wait()
                engine.now(mine, "paint", "red")
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=admit, args=(i,)) for i in ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    found = list(statuses(session).values())
    assert found.count("performing") == 1
    assert found.count("pending") == 1
    assert found.count("superseded") == 6
    assert session.scalar(select(func.count()).select_from(Performance)) == 1


# --- 2 ---------------------------------------------------------------------------------


def test_invariant_2_a_second_outbound_completion_changes_nothing(session: Session, car: Car) -> None:
    """Stepped finalizes an action again when completed twice while its lane lives on.
    Ours: the second completion says "already_completed", runs no callback, keeps the
    first status."""
    drive = engine.define(Car, "drive", outbound=True, concurrency_key="shared")
    calls: list[str] = []
    drive.after(lambda car, action, *a: calls.append(action.status))
    first = engine.now(car, "drive", 1)
    engine.now(car, "drive", 2)  # keeps the lane alive after the first completes

    done = engine.complete_action(first.id, "succeeded")
    again = engine.complete_action(first.id, "failed")

    assert bool(done) is True
    assert bool(again) is False and again.reason == "already_completed"
    session.expire_all()
    assert session.get(Action, first.id).status == "succeeded"  # type: ignore[union-attr]
    assert calls == ["succeeded"]
    completions = session.scalars(
        select(ActionEvent).where(ActionEvent.action_id == first.id, ActionEvent.event == "completed")
    ).all()
    assert len(completions) == 1


def test_invariant_2_a_late_timeout_and_a_late_child_change_nothing(session: Session, car: Car) -> None:
    """Given a parent whose child is still performing when the parent times out, when the
    child then succeeds and the timeout message is delivered again, the parent stays
    timed_out with its first completion time, and its callbacks ran once."""
    testing.freeze(testing.travel(timedelta()))
    trip = engine.define(Car, "trip", timeout=timedelta(seconds=5))
    engine.define(Car, "drive", outbound=True)
    callbacks: list[str] = []
    trip.after(lambda car, action, *a: callbacks.append(action.status))

    @trip.step
    def go(car: Car, step: StepContext) -> None:
        step.do("drive", 1)

    parent = engine.now(car, "trip")
    testing.drain()
    testing.travel(timedelta(seconds=6))
    assert testing.drain() == 1  # the timeout
    session.expire_all()
    timed_out = session.get(Action, parent.id)
    assert timed_out is not None and timed_out.status == "timed_out"
    completed_at = timed_out.completed_at

    assert engine.complete(car, "drive")  # the late child
    from engine import jobs

    jobs.timeout.fn(parent.id)  # a redelivered timeout message
    session.expire_all()
    timed_out = session.get(Action, parent.id)
    assert timed_out is not None
    assert (timed_out.status, timed_out.completed_at) == ("timed_out", completed_at)
    assert callbacks == ["timed_out"]


# --- 3 ---------------------------------------------------------------------------------


def test_invariant_3_the_same_work_requested_twice_in_one_step_does_not_strand_it(
    session: Session, car: Car, counts: Counts
) -> None:
    """Stepped counts 2 on the step but links the reused action once, so its one
    conclusion leaves the counter at 1 forever. Ours: each invocation concludes once."""
    engine.define(Car, "visit", Car.change_location, checksum=lambda car, location: location, outbound=True)
    trip = engine.define(Car, "trip")

    @trip.step
    def go(car: Car, step: StepContext) -> None:
        step.do("visit", "Paris")
        step.do("visit", "Paris")

    parent = engine.now(car, "trip")
    testing.drain()
    assert counts.delta()["actions"] == 2  # the trip and one shared visit
    step = session.scalars(select(Step).where(Step.action_id == parent.id)).one()
    assert step.pending_actions_count == 2

    assert engine.complete(car, "visit")
    session.expire_all()
    assert session.get(Step, step.id).pending_actions_count == 0  # type: ignore[union-attr]
    assert session.get(Action, parent.id).status == "succeeded"  # type: ignore[union-attr]


def test_invariant_3_a_redelivered_wait_concludes_its_step_once(session: Session, car: Car) -> None:
    """Given a step that waits twice, when the first wait's message is delivered three
    times, the step still waits for the second wait."""
    testing.freeze(testing.travel(timedelta()))
    pause = engine.define(Car, "pause")

    @pause.step
    def wait(car: Car, step: StepContext) -> None:
        step.wait(timedelta(seconds=5))
        step.wait(timedelta(seconds=50))

    action = engine.now(car, "pause")
    first_wait = session.scalars(
        select(Invocation.id).where(Invocation.kind == "wait").order_by(Invocation.id)
    ).first()
    testing.travel(timedelta(seconds=6))
    from engine import jobs

    for _ in range(3):
        jobs.wait_over.fn(first_wait)
    session.expire_all()
    step = session.scalars(select(Step).where(Step.action_id == action.id)).one()
    assert (step.pending_actions_count, step.status) == (1, "performing")
    testing.travel(timedelta(seconds=60))
    testing.drain()
    session.expire_all()
    assert session.get(Action, action.id).status == "succeeded"  # type: ignore[union-attr]


# --- 4 ---------------------------------------------------------------------------------


def test_invariant_4_later_is_recorded_in_the_callers_transaction(session: Session, car: Car) -> None:
    """Given later() in a transaction that rolls back, nothing is recorded or sent; given
    one that commits, the invocation is durable before the message goes out, and the
    worker performs it."""
    engine.later(car, "drive", 3)
    session.rollback()
    assert testing.enqueued() == []
    assert session.scalar(select(func.count()).select_from(Invocation)) == 0

    car = session.scalars(select(Car)).one()
    engine.later(car, "drive", 3)
    assert testing.enqueued() == []  # not before commit
    session.commit()
    assert [m.job for m in testing.enqueued()] == ["stepwise.admit"]
    testing.drain()
    session.refresh(car)
    assert car.mileage == 3


def test_invariant_4_an_invocation_whose_actor_vanished_visibly_fails(session: Session, car: Car) -> None:
    """Given a later() whose car is deleted before a worker admits it, the invocation ends
    visibly: settled as failed with the reason, not silently dropped."""
    engine.later(car, "drive", 3)
    session.commit()
    session.delete(car)
    session.commit()
    testing.drain()
    invocation = session.scalars(select(Invocation)).one()
    session.refresh(invocation)
    assert invocation.outcome == "failed"
    assert invocation.error_message is not None and "no longer exists" in invocation.error_message


def test_invariant_4_unknown_actions_are_refused_when_invoked(session: Session, car: Car) -> None:
    with pytest.raises(engine.UnknownAction, match="Car has no action 'fly'"):
        engine.later(car, "fly")


# --- 5 ---------------------------------------------------------------------------------


def test_invariant_5_reuse_never_attaches_to_a_superseded_action(session: Session, car: Car) -> None:
    """Stepped's reuse scans every action still pointing at the lane, superseded ones
    included, so a parent could wait forever on work that will never run. Ours queues a
    new action instead, and everything concludes."""
    engine.define(
        Car, "visit", Car.change_location, outbound=True, concurrency_key="road", checksum=lambda c, loc: loc
    )
    trip = engine.define(Car, "trip")

    @trip.step
    def go(car: Car, step: StepContext) -> None:
        step.do("visit", "Paris")

    engine.now(car, "visit", "Rome")  # performing: holds the lane
    paris = engine.now(car, "visit", "Paris")  # queued
    engine.now(car, "visit", "Oslo")  # supersedes Paris
    session.expire_all()
    assert session.get(Action, paris.id).status == "superseded"  # type: ignore[union-attr]

    parent = engine.now(car, "trip")
    testing.drain()
    child = session.scalars(select(Invocation).where(Invocation.parent_step_id.is_not(None))).one()
    assert child.outcome == "admitted" and child.action_id != paris.id

    testing.perform_actions(complete_outbound_with="succeeded")
    session.expire_all()
    assert session.get(Action, parent.id).status == "succeeded"  # type: ignore[union-attr]


# --- 6 ---------------------------------------------------------------------------------


def test_invariant_6_the_achievement_grant_is_an_upsert(session: Session, car: Car) -> None:
    """Two lanes share one checksum_key. Stepped's plain INSERT makes the second
    completion fail on the unique index. Ours replaces the row."""
    engine.define(
        Car,
        "drive",
        outbound=True,
        concurrency_key=lambda car, n: f"lane/{n}",
        checksum_key="fleet",
        checksum=lambda car, n: n,
    )
    first = engine.now(car, "drive", 1)
    second = engine.now(car, "drive", 2)
    assert {first.status, second.status} == {"performing"}

    assert engine.complete_action(first.id)
    assert engine.complete_action(second.id)
    session.expire_all()
    rows = session.scalars(select(Achievement)).all()
    assert [(a.checksum_key, a.checksum) for a in rows] == [("fleet", engine.checksum(2))]


# --- 7 ---------------------------------------------------------------------------------


def test_invariant_7_every_state_change_lands_in_the_history_with_its_cause(
    session: Session, car: Car
) -> None:
    """A tree's history tells its story in order, each entry with a cause."""
    engine.define(Car, "paint", Car.change_location, outbound=True)
    trip = engine.define(Car, "trip")

    @trip.step
    def go(car: Car, step: StepContext) -> None:
        step.do("paint", "red")

    parent = engine.now(car, "trip")
    testing.drain()
    engine.complete(car, "paint", by="alice", note="looks good")
    events = session.scalars(
        select(ActionEvent).where(ActionEvent.root_id == parent.id).order_by(ActionEvent.id)
    ).all()
    story = [(e.action_id == parent.id, e.event, e.cause) for e in events]
    assert story == [
        (True, "admitted", "worker"),
        (True, "started", "worker"),
        (True, "step_started", "worker"),
        (True, "children_spawned", "worker"),
        (False, "admitted", "worker"),
        (False, "started", "worker"),
        (False, "step_started", "worker"),
        (False, "step_concluded", "worker"),
        (False, "awaiting_completion", "worker"),
        (False, "completed", "caller"),
        (True, "step_concluded", "worker"),
        (True, "completed", "worker"),
    ]
    completed = next(e for e in events if e.event == "completed" and e.action_id != parent.id)
    assert (completed.by, completed.data["note"], completed.data["status"]) == (
        "alice",
        "looks good",
        "succeeded",
    )


# --- 8 ---------------------------------------------------------------------------------


def test_invariant_8_an_error_in_a_step_is_stored_on_the_action_row(session: Session, car: Car) -> None:
    """A handled error is stored on the failing action (class, message, traceback) and in
    its history, never only logged."""
    engine.define(Car, "breakdown")
    with testing.handle_exceptions():
        action = engine.now(car, "breakdown")
    session.expire_all()
    failed = session.get(Action, action.id)
    assert failed is not None and failed.status == "failed"
    assert failed.error_class == "builtins.RuntimeError"
    assert failed.error_message == "breakdown"
    assert failed.error_traceback is not None and "def breakdown" not in failed.error_traceback
    assert "raise RuntimeError" in failed.error_traceback
    step_failed = session.scalars(
        select(ActionEvent).where(ActionEvent.action_id == action.id, ActionEvent.event == "step_failed")
    ).one()
    assert step_failed.data["error_class"] == "builtins.RuntimeError"
