"""Actions keep their arguments: actor rows pass as references and load again as live rows
(and a step may start different actions on several actors); the ``before`` hook may change
the arguments, and the checksum uses the changed ones; arguments a step adds are persisted
for the later steps.

Spec §8 cases 24-26 (test/models/stepped/action_test.rb). Stepped's
``ActionJob.perform_now`` is ``engine.now``; its ``perform_enqueued_jobs(only: ActionJob)``
is ``testing.perform_enqueued()`` and ``perform_enqueued_jobs_recursively`` is
``testing.drain()``. Jobs commit in their own sessions, so ``reread(session)`` ends the test
session's snapshot and expires what it holds before the rows are read again.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

import engine
from engine import StepContext, testing
from engine.models import Action
from tests.action_helpers import no_change, reread
from tests.conftest import Counts
from tests.domain import Account, Car


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
