"""After-callbacks run when an action completes: once for an outbound method action
completed from outside (a second completion is refused), and even when they were added
before the action was declared.

Spec §8 cases 31 and 33 (test/models/stepped/action_test.rb). Stepped's
``ActionJob.perform_now`` is ``engine.now``; ``reread(session)`` ends the test session's
snapshot and expires what it holds before the rows are read again.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

import engine
from engine.models import Action
from tests.action_helpers import reread
from tests.domain import Car


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
