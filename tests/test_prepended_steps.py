"""A step prepended to an action runs before its declared steps: the action's ``before``
hook still runs once, and an error in the prepended step fails the action.

Spec §8 cases 68-69 (test/models/stepped/action_prepend_step_test.rb).
``prepend_stepped_action_step :interact { }`` is ``engine.definition(Car, "interact").prepend_step``.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import testing
from tests.conftest import Counts
from tests.domain import Car


def declare_interact() -> None:
    """``interact`` counts its befores, has a checksum and honks; a step that oinks is
    then prepended to it from outside the declaration."""
    interact = engine.define(Car, "interact", checksum=lambda car: 1)

    @interact.before
    def count_before(car: Car, action: engine.Action) -> None:
        car.befores += 1

    @interact.step
    def honk(car: Car, step: engine.StepContext) -> None:
        step.do("honk")

    @engine.definition(Car, "interact").prepend_step
    def oink_first(car: Car, step: engine.StepContext) -> None:
        step.do("oink")

    # Stepped's setup also declares an unused ``boink``.
    engine.define(Car, "boink", lambda car: None)


def test_a_step_prepended_after_the_definition_runs_first(session: Session, car: Car, counts: Counts) -> None:
    """Spec §8 case 68: step prepended after action definition."""
    # Given interact with a prepended oink step
    declare_interact()

    # When it is performed
    action = engine.now(car, "interact")

    # Then it performs its prepended step first
    assert counts.delta() == {"actions": 1, "steps": 1, "performances": 1, "achievements": 0}
    session.refresh(action)
    assert action.status == "performing"
    assert action.name == "interact"
    assert action.checksum == engine.checksum(1)
    assert action.concurrency_key == f"Car/{car.id}/interact"
    assert action.checksum_key == f"Car/{car.id}/interact"
    session.refresh(car)
    assert (car.oinks, car.honks, car.befores) == (0, 0, 1)
    (step,) = action.steps
    assert step.status == "performing"

    # When the queued oink is performed
    testing.perform_enqueued()

    # Then the oink ran and the declared step started
    assert counts.delta() == {"actions": 1, "steps": 2, "performances": 0, "achievements": 0}
    session.refresh(action)
    session.refresh(car)
    assert action.status == "performing"
    assert (car.oinks, car.honks, car.befores) == (1, 0, 1)

    # When the queued honk is performed
    testing.perform_enqueued()

    # Then the action succeeded, granting its achievement, and before ran only once
    assert counts.delta() == {"actions": 1, "steps": 1, "performances": -1, "achievements": 1}
    session.refresh(action)
    session.refresh(car)
    assert action.status == "succeeded"
    last = session.scalars(select(engine.Achievement).order_by(engine.Achievement.id.desc())).first()
    assert last is not None
    assert action.checksum == last.checksum
    assert (car.oinks, car.honks, car.befores) == (1, 1, 1)


def test_an_exception_in_a_prepended_step_fails_the_action(
    session: Session, car: Car, counts: Counts
) -> None:
    """Spec §8 case 69: exception in dependencies block fails the action. The error is
    stored on the action (DESIGN invariant 8)."""
    # Given born_to_fail, whose prepended step raises before its own step
    born_to_fail = engine.define(Car, "born_to_fail")

    @born_to_fail.step
    def should_not_run(car: Car, step: engine.StepContext) -> None:
        car.honk()

    @engine.definition(Car, "born_to_fail").prepend_step
    def dependencies(car: Car, step: engine.StepContext) -> None:
        raise RuntimeError("dependencies")

    # When it is performed with exceptions handled
    with testing.handle_exceptions():
        action = engine.now(car, "born_to_fail")

    # Then the action was created and failed in its prepended step
    assert counts.delta()["actions"] == 1
    session.refresh(action)
    assert action.name == "born_to_fail"
    assert action.status == "failed"
    assert action.error_class == "builtins.RuntimeError"
    assert action.error_message == "dependencies"
    assert action.error_traceback is not None
    # and its own step never ran
    assert len(action.steps) == 1
    session.refresh(car)
    assert car.honks == 0
