"""Given plain Python classes carrying actions, when the registry is asked for a class's
action, then it finds the class's own definition, else the nearest parent's; a subclass
that changes an inherited definition gets its own copy and leaves the parent's alone."""

from __future__ import annotations

from typing import Any

import dramatiq
import pytest

import engine
from engine import broker, registry, status


def STEP_ONE(car: Any, step: engine.StepContext) -> None:
    pass


def STEP_TWO(car: Any, step: engine.StepContext) -> None:
    pass


def STEP(car: Any, step: engine.StepContext) -> None:
    pass


def AFTER_CALLBACK(car: Any, action: engine.Action) -> None:
    pass


class Car:
    """Not a table: any class can carry action definitions. Its actor type is its own: the
    tests' other Car (tests/domain.py) is a table, and one type names one class."""

    __actor_type__ = "PlainCar"


class FlyingCar(Car):
    pass


class DifferentlyDrivingCar(Car):
    pass


# Declared once, on the engine's broker (the stub broker in tests), as engine.jobs declares
# its own; every test's fresh stub broker takes over the jobs declared before it.
@dramatiq.actor(actor_name="fly_job", queue_name="default", broker=broker.setup())
def fly_job(action_id: int) -> None:
    """Stepped's FlyJob; these tests never run it."""


@pytest.fixture(autouse=True)
def definitions() -> None:
    """Stepped declares these in the class bodies; the registry is restored after each test."""
    drive = engine.define(Car, "drive")
    drive.step(STEP_ONE)
    drive.step(STEP_TWO)
    drive.after(AFTER_CALLBACK)

    engine.define(FlyingCar, "fly", job=fly_job)

    engine.define(DifferentlyDrivingCar, "drive").step(STEP)


def callback_functions(definition: engine.Definition) -> list[Any]:
    return [fn for _, fn in definition.callbacks]


def test_job_classes_lists_every_job_used_in_a_definition() -> None:
    """Spec §8 case 9: FlyJob (a Dramatiq job here, an ActiveJob class in Stepped) is among
    ``registry.job_classes()``."""
    assert fly_job in registry.job_classes()


def test_find_gives_nothing_when_the_action_is_not_defined_for_the_class() -> None:
    """Spec §8 case 10."""
    assert registry.find(Car, "fly") is None


def assert_is_cars_drive(definition: engine.Definition | None) -> None:
    assert isinstance(definition, engine.Definition)
    assert definition.name == "drive"
    assert definition.actor_class is Car
    assert len(definition.steps) == 2
    assert definition.steps[0] is STEP_ONE
    assert definition.steps[1] is STEP_TWO
    assert all(callable(step) for step in definition.steps)
    assert len(definition.callbacks) == 1
    assert definition.callbacks[0] == (status.ALL, AFTER_CALLBACK)


def test_find_gives_the_definition_when_the_name_is_a_literal() -> None:
    """Spec §8 case 11 ("when action name is a Symbol"). Python has no symbols: action
    names are always str; this case looks the action up by a string literal."""
    assert_is_cars_drive(registry.find(Car, "drive"))


def test_find_gives_the_definition_when_the_name_is_a_string_built_at_run_time() -> None:
    """Spec §8 case 12 ("when action name is a String"). Names are matched by value: a
    string equal to "drive" but built at run time (not the same object) finds it too."""
    name = "".join(["dr", "ive"])

    assert_is_cars_drive(registry.find(Car, name))


def test_a_parent_does_not_get_its_childs_definitions() -> None:
    """Spec §8 case 13: FlyingCar's ``fly`` is not Car's."""
    assert registry.find(Car, "fly") is None


def test_a_child_inherits_an_action_from_its_parent() -> None:
    """Spec §8 case 14: FlyingCar's ``drive`` is Car's own definition object."""
    definition = registry.find(FlyingCar, "drive")

    assert definition is not None
    assert definition.actor_class is Car
    assert definition is registry.find(Car, "drive")


def test_a_child_may_override_an_inherited_definition() -> None:
    """Spec §8 case 15: DifferentlyDrivingCar's ``drive`` has its one step."""
    definition = registry.find(DifferentlyDrivingCar, "drive")

    assert definition is not None
    assert len(definition.steps) == 1
    assert definition.steps[0] is STEP
    assert definition is not registry.find(Car, "drive")


def test_adding_after_callbacks_to_a_child_does_not_modify_the_parents_action() -> None:
    """Spec §8 case 16: ``engine.definition(FlyingCar, "drive")`` (Stepped's
    ``after_stepped_action``) copies Car's inherited definition for FlyingCar first.

    Stepped's test deletes FlyingCar's registry entry in an ensure block because its
    registry leaks between tests; ours is restored after every test by the conftest."""

    def one(car: Any, action: engine.Action) -> None:
        pass

    def two(car: Any, action: engine.Action) -> None:
        pass

    # When FlyingCar adds two after-callbacks to the drive it inherits
    engine.definition(FlyingCar, "drive").after(one)
    engine.definition(FlyingCar, "drive").after(two)

    # Then Car's definition still has its one callback
    parent_definition = registry.find(Car, "drive")
    assert parent_definition is not None
    assert callback_functions(parent_definition) == [AFTER_CALLBACK]

    # And FlyingCar has its own definition with the parent's callback and its two
    definition = registry.find(FlyingCar, "drive")
    assert definition is not None
    assert definition is not parent_definition
    assert len(definition.callbacks) == 3
    assert callback_functions(definition)[0] is AFTER_CALLBACK
    assert callback_functions(definition)[1] is one
    assert callback_functions(definition)[2] is two


def test_prepending_a_step_to_a_child_does_not_modify_the_parents_action() -> None:
    """Issue 9: the copy made for the child carries the parent's prepended steps in a list
    of its own, so a step prepended to the child's copy is the child's alone."""

    def parents_first(car: Any, step: engine.StepContext) -> None:
        pass

    def childs_first(car: Any, step: engine.StepContext) -> None:
        pass

    # Given Car's drive with a prepended step of its own
    engine.definition(Car, "drive").prepend_step(parents_first)

    # When FlyingCar prepends a step to the drive it inherits
    engine.definition(FlyingCar, "drive").prepend_step(childs_first)

    # Then Car's drive runs as before
    parent_definition = registry.find(Car, "drive")
    assert parent_definition is not None
    assert parent_definition.all_steps() == [parents_first, STEP_ONE, STEP_TWO]

    # And FlyingCar's runs its own prepended step, then the parent's, then the declared ones
    definition = registry.find(FlyingCar, "drive")
    assert definition is not None and definition is not parent_definition
    assert definition.all_steps() == [childs_first, parents_first, STEP_ONE, STEP_TWO]


def test_prepending_a_step_through_a_childs_inherited_action_leaves_the_parents_alone() -> None:
    """Issue 9: ``Child.action.prepend_step`` on an action declared with ``@action`` in the
    parent's class body copies the definition for the child first, prepended steps too."""

    class Truck:
        __actor_type__ = "PlainTruck"  # the integration workload's Truck is another class

        @engine.action
        def haul(self, step: engine.StepContext) -> None:
            pass

    class TowTruck(Truck):
        pass

    def hook_up(truck: Any, step: engine.StepContext) -> None:
        pass

    # When the subclass prepends a step to the action it inherits
    TowTruck.haul.prepend_step(hook_up)

    # Then only the subclass runs it
    parent_definition = registry.find(Truck, "haul")
    child_definition = registry.find(TowTruck, "haul")
    assert parent_definition is not None and child_definition is not None
    assert [fn.__name__ for fn in parent_definition.all_steps()] == ["haul"]
    assert [fn.__name__ for fn in child_definition.all_steps()] == ["hook_up", "haul"]
