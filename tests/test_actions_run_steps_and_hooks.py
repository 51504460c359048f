"""Actions run their steps, wait for the children those steps start, and call their hooks:
``before`` may change the arguments, cancel or complete the invocation; after-callbacks
run on completion, even when added before the action is declared.

Spec §8 cases 22-33 (test/models/stepped/action_test.rb). Stepped's
``ActionJob.perform_now`` is ``engine.now``; its ``perform_enqueued_jobs(only: ActionJob)``
is ``testing.perform_enqueued()`` and ``perform_enqueued_jobs_recursively`` is
``testing.drain()``. Jobs commit in their own sessions, so ``reread(session)`` ends the
test session's snapshot and expires what it holds before the rows are read again.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import StepContext, testing
from engine.models import Action, Performance, Step
from tests.conftest import Counts
from tests.domain import Account, Car

T = datetime(2024, 12, 12)


def reread(session: Session) -> None:
    """Read what jobs committed: end the test session's snapshot (SQLite keeps one per
    transaction) and expire every row it holds."""
    session.commit()
    session.expire_all()


def last_actions(session: Session, count: int) -> list[Action]:
    """The ``count`` most recently admitted actions, oldest first (Stepped's ``Action.last(n)``)."""
    newest = session.scalars(select(Action).order_by(Action.id.desc()).limit(count)).all()
    return list(reversed(newest))


def no_change(**changes: int) -> dict[str, int]:
    return {"actions": 0, "steps": 0, "performances": 0, "achievements": 0, **changes}


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
    assert first.performance_id == lane.id

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
    assert second.performance_id == lane.id
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


def test_actor_rows_pass_as_arguments_and_a_step_starts_different_actions_on_several_actors(
    session: Session, car: Car, counts: Counts
) -> None:
    """Spec §8 case 24: passing active record objects as arguments and using ``on`` with
    several different actions. Skipped ("TODO") in Stepped; ours is implemented: actor rows
    are stored in the arguments as references (type and id) and loaded again, as live rows
    of the session that runs the step, wherever the step runs."""
    follower = Car()
    account = Account(name="fleet")
    session.add_all([follower, account])
    session.commit()
    engine.define(Car, "follow", lambda car, leader: car.change_location(f"behind car {leader.id}"))
    convoy = engine.define(Car, "convoy")

    @convoy.step
    def set_off(car: Car, step: StepContext, follower: Car, account: Account, miles: int) -> None:
        step.on([car, follower], "drive", miles)
        step.on(follower, "honk")
        step.on(account, "fly")
        step.on(follower, "follow", car)

    @convoy.step
    def arrive(car: Car, step: StepContext, follower: Car, account: Account, miles: int) -> None:
        account.name = f"convoy of car {car.id} and car {follower.id}"

    # When the convoy is performed now with a car and an account as arguments
    action = engine.now(car, "convoy", follower, account, 10)

    # Then the rows are stored as references, and the first step waits on five children:
    # one action on two actors, and three different actions on two other actors
    assert counts.delta() == no_change(actions=1, steps=1, performances=1)
    assert action.status == "performing"
    assert action.arguments_json == [
        {"__stepwise__": "actor", "type": "Car", "id": str(follower.id)},
        {"__stepwise__": "actor", "type": "Account", "id": str(account.id)},
        10,
    ]
    with engine.new_session() as other:
        stored = other.get(Action, action.id)
        assert stored is not None
        loaded_follower, loaded_account, miles = stored.arguments
        assert isinstance(loaded_follower, Car) and loaded_follower.id == follower.id
        assert isinstance(loaded_account, Account) and loaded_account.name == "fleet"
        assert miles == 10
    assert len(testing.enqueued("stepwise.admit")) == 5
    assert action.steps[0].pending_actions_count == 5

    # When the children are performed
    assert testing.drain() == 5

    # Then each ran on its own actor, the second step changed the account argument, and
    # the convoy succeeded
    assert counts.delta() == no_change(actions=5, steps=6, performances=-1)
    reread(session)
    children = action.steps[0].actions
    assert [(a.actor_type, a.actor_id, a.name) for a in children] == [
        ("Car", str(car.id), "drive"),
        ("Car", str(follower.id), "drive"),
        ("Car", str(follower.id), "honk"),
        ("Account", str(account.id), "fly"),
        ("Car", str(follower.id), "follow"),
    ]
    assert all(a.status == "succeeded" and a.root is False for a in children)
    follow = children[-1]
    assert follow.arguments_json == [{"__stepwise__": "actor", "type": "Car", "id": str(car.id)}]
    assert follow.arguments == [car]
    assert (car.mileage, follower.mileage) == (10, 10)
    assert (car.honks, follower.honks) == (0, 1)
    assert follower.location == f"behind car {car.id}"
    assert account.name == f"convoy of car {car.id} and car {follower.id}"
    assert [s.status for s in action.steps] == ["succeeded", "succeeded"]
    assert action.status == "succeeded"


def test_the_before_hook_may_change_the_arguments_and_the_checksum_uses_the_changed_ones(
    session: Session, car: Car
) -> None:
    """Spec §8 case 25: modifying arguments in before block and checksum uses arguments
    modified in before block."""
    multiplied_drive = engine.define(Car, "multiplied_drive", checksum=lambda car, distance: distance)

    @multiplied_drive.before
    def double(car: Car, action: Action, distance: int) -> None:
        action.arguments = [distance * 2]

    @multiplied_drive.step
    def go(car: Car, step: StepContext, distance: int) -> None:
        step.do("drive", distance)

    # When it is performed with 5
    action = engine.now(car, "multiplied_drive", 5)
    assert testing.drain() == 1

    # Then it ran, and is remembered, with the doubled distance
    reread(session)
    assert action.status == "succeeded"
    assert action.arguments == [10]
    assert car.mileage == 10
    assert action.checksum == engine.checksum(10)


def test_arguments_added_within_a_step_are_persisted(session: Session, car: Car) -> None:
    """Spec §8 case 26: added arguments within a step are persisted, and later steps
    (run by another job, after the child of step 2) receive them."""
    argument_add_in_step = engine.define(Car, "argument_add_in_step")

    @argument_add_in_step.step
    def add_argument(car: Car, step: StepContext) -> None:
        step.action.arguments.append(33)

    @argument_add_in_step.step
    def drive_two(car: Car, step: StepContext, *arguments: Any) -> None:
        step.do("drive", 2)

    @argument_add_in_step.step
    def drive_distance(car: Car, step: StepContext, distance: int) -> None:
        car.drive(distance)

    # When it is performed with no arguments
    action = engine.now(car, "argument_add_in_step")
    testing.drain()

    # Then the argument added by step 1 was stored and used by step 3
    reread(session)
    assert action.status == "succeeded"
    assert action.arguments == [33]
    assert car.mileage == 35


def define_cancelled_drive() -> None:
    cancelled_drive = engine.define(Car, "cancelled_drive")

    @cancelled_drive.before
    def cancel(car: Car, action: Action) -> None:
        action.cancel()

    @cancelled_drive.step
    def never(car: Car, step: StepContext) -> None:
        raise AssertionError("This should not be reached")


def test_cancelling_an_action_in_its_before_hook_creates_nothing(car: Car, counts: Counts) -> None:
    """Spec §8 case 27: cancelling action in before block. Nothing is admitted (DESIGN: the
    invocation record keeps the outcome; no action, step, lane or achievement row)."""
    define_cancelled_drive()

    # When it is performed now
    action = engine.now(car, "cancelled_drive")

    # Then it ends cancelled and no row was created in any of the four tables
    assert action.status == "cancelled"
    assert action.id is None
    assert counts.delta() == no_change()


def test_cancelling_a_nested_action_in_its_before_hook_fails_the_parent_step(
    session: Session, car: Car, counts: Counts
) -> None:
    """Spec §8 case 28: cancelling nested action in before block completes parent step as
    failed. Two actions are admitted: the trip and the honk; the cancelled drive never is."""
    define_cancelled_drive()
    failed_trip = engine.define(Car, "failed_trip")

    @failed_trip.step
    def honk_then_drive(car: Car, step: StepContext) -> None:
        step.do("honk")
        step.do("cancelled_drive")

    # When the trip is performed now
    parent = engine.now(car, "failed_trip")
    assert parent.name == "failed_trip"
    assert len(parent.steps) == 1

    # And its children are performed
    testing.drain()

    # Then the honk ran, the cancelled drive failed the step, and the step the trip
    assert counts.delta() == no_change(actions=2, steps=2)
    reread(session)
    assert car.honks == 1
    assert parent.status == "failed"
    assert parent.steps[-1].status == "failed"


@pytest.mark.parametrize("outbound", [False, True], ids=["inbound", "outbound"])
def test_completing_a_nested_action_in_its_before_hook_concludes_the_parent_step_successfully(
    session: Session, car: Car, counts: Counts, outbound: bool
) -> None:
    """Spec §8 cases 29 and 30: completing nested action (outbound: false / true) in before
    block. Despite Stepped's title ("... completes parent step as failed"), its assertions,
    kept here, say the step succeeds. A completion in ``before`` skips the outbound
    behaviour: the action is never admitted, so it never waits for an outside completion."""
    complete_early = engine.define(Car, "complete_early", outbound=outbound)

    @complete_early.before
    def complete_at_once(car: Car, action: Action) -> None:
        action.complete()

    @complete_early.step
    def never(car: Car, step: StepContext) -> None:
        raise AssertionError("This should not be reached")

    trip = engine.define(Car, "trip")

    @trip.step
    def honk_then_complete_early(car: Car, step: StepContext) -> None:
        step.do("honk")
        step.do("complete_early")

    # When the trip is performed now
    assert engine.now(car, "trip")

    # Then its step waits on both children
    assert counts.delta() == no_change(actions=1, steps=1, performances=1)
    step = session.scalars(select(Step).order_by(Step.id.desc()).limit(1)).one()
    assert step.status == "performing"
    assert step.pending_actions_count == 2
    assert step.unsuccessful_actions_count == 0

    # When the children are performed
    testing.drain()

    # Then only the honk was admitted, and the step and the trip succeeded
    assert counts.delta() == no_change(actions=1, steps=1, performances=-1)
    reread(session)
    assert car.honks == 1
    assert step.status == "succeeded"
    assert step.pending_actions_count == 0
    assert step.unsuccessful_actions_count == 0
    assert [(a.name, a.status) for a in last_actions(session, 2)] == [
        ("trip", "succeeded"),
        ("honk", "succeeded"),
    ]


def test_a_method_action_declared_outbound_completes_from_outside_once(session: Session, car: Car) -> None:
    """Spec §8 case 31: method call action that completes outbound. Stepped asserts that
    its in-memory action "still says performing without reload": ActiveRecord has no
    identity map. Ours completes through the car's own session, whose identity map holds
    that action, so the completed status is visible on it at once; the second completion
    is refused, as in Stepped, with a falsy Completion instead of nil."""
    drive = engine.define(Car, "drive", outbound=True)

    @drive.after
    def honk_whatever_happened(car: Car, action: Action, miles: int) -> None:
        car.honk()

    # When drive is performed now
    action = engine.now(car, "drive", 1)

    # Then it waits for an outside completion
    assert action.status == "performing"

    # When it is completed from outside
    completion = engine.complete(car, "drive")

    # Then the after-callback ran once
    assert completion
    assert completion.action is action
    reread(session)
    assert car.honks == 1

    # When it is completed again, as failed
    again = engine.complete(car, "drive", "failed")

    # Then nothing changes: it stays succeeded and the callback did not run again
    assert not again
    assert again.reason == "already_completed"
    reread(session)
    assert car.honks == 1
    assert action.status == "succeeded"


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


def test_after_callbacks_may_be_added_before_the_action_is_declared(session: Session, car: Car) -> None:
    """Spec §8 case 33: adding after callbacks for an action that is not yet defined. The
    first one creates the default (method call) definition; the second uses the same one."""
    # Given drive is not declared
    assert engine.registry.find(Car, "drive") is None

    # When a succeeded callback is added to it
    def drive_again(car: Car, action: Action, mileage: int) -> None:
        car.mileage += mileage

    engine.definition(Car, "drive").after("succeeded")(drive_again)

    # Then a definition exists
    definition = engine.registry.find(Car, "drive")
    assert definition is not None

    # When a callback for all statuses is added
    def honk(car: Car, action: Action, mileage: int) -> None:
        car.honk()

    engine.definition(Car, "drive").after(honk)

    # Then it went to the same definition
    assert engine.registry.find(Car, "drive") is definition

    # When drive is performed now
    action = engine.now(car, "drive", 30)

    # Then the method and both callbacks ran
    assert action.status == "succeeded"
    assert car.mileage == 60
    assert car.honks == 1
    assert action.after_callbacks_succeeded_count == 2
    assert action.after_callbacks_failed_count is None
