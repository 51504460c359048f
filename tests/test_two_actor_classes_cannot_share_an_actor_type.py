"""Given an actor class registered under its actor type (the class name, stored on every
action row), when a second, different class would be registered under the same type (an
``engine.Actor`` subclass, a definition, a service object), then it is refused at once with
an error naming both classes and the remedy: an explicit ``__actor_type__``. The same class
registered again (a definition redefined, a module reloaded, the registry restored by a
test) is no error.

Not a spec case: Stepped's actor types are Rails class names, unique in an application; in
Python two modules may each have an ``Order`` (the demo's and the chaos workload's).
"""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session

import engine
from app import demo
from engine import registry
from engine.errors import ActorTypeTaken, EngineError
from tests.domain import Car
from tests.integration import chaos_workload


def twin(name: str, *bases: type, **namespace: object) -> type:
    """A class named ``name`` from another module than the one registered under that name."""
    return type(name, bases, {"__module__": "somewhere.else", **namespace})


def test_an_actor_class_named_like_another_is_refused_when_it_is_defined() -> None:
    with pytest.raises(ActorTypeTaken) as refused:
        twin("Car", engine.Actor)

    message = str(refused.value)
    assert "'Car'" in message
    assert "tests.domain.Car" in message and "somewhere.else.Car" in message
    assert "__actor_type__" in message
    assert isinstance(refused.value, EngineError)
    # And the first class keeps its type
    assert registry.actor_class("Car") is Car


def test_a_definition_or_a_service_of_a_class_named_like_another_is_refused() -> None:
    plain = twin("Car")

    with pytest.raises(ActorTypeTaken):
        engine.define(plain, "drive")
    with pytest.raises(ActorTypeTaken):
        engine.register_service(plain(), id="one")

    assert registry.find(plain, "drive") is None
    assert registry.actor_class("Car") is Car


def test_an_explicit_actor_type_tells_two_classes_of_one_name_apart(session: Session, car: Car) -> None:
    # Given a service class named Car that declares its own actor type
    other = twin("Car", __actor_type__="RentalCar")
    engine.define(other, "rent", lambda rental, days: None)
    rental = engine.register_service(other(), id="fleet")

    # When actions run on both
    rented = engine.now(rental, "rent", 3)
    driven = engine.now(car, "drive", 1)

    # Then each is stored under its own type, and found back as its own class
    assert (rented.actor_type, rented.actor_id) == ("RentalCar", "fleet")
    assert driven.actor_type == "Car"
    assert registry.actor_class("RentalCar") is other
    assert registry.actor_class("Car") is Car
    assert rented.status == driven.status == "succeeded"


def test_a_subclass_does_not_inherit_its_parents_explicit_actor_type() -> None:
    parent = twin("Lorry", __actor_type__="HeavyLorry")
    child = type("Tipper", (parent,), {"__module__": "somewhere.else"})

    assert registry.type_name(parent) == "HeavyLorry"
    assert registry.type_name(child) == "Tipper"


def test_registering_the_same_class_again_is_no_error() -> None:
    saved = registry.snapshot()
    engine.define(Car, "wash")
    engine.define(Car, "wash")
    registry.add_actor_class(Car)
    registry.restore(saved)
    engine.define(Car, "wash")

    assert registry.actor_class("Car") is Car


def test_a_reloaded_module_registers_its_new_class_in_place_of_the_old() -> None:
    """A reload makes a new class object of the same module and qualified name."""

    def load() -> type:
        return type("Scooter", (engine.Actor,), {"__module__": "somewhere.reloaded"})

    first = load()
    again = load()

    assert again is not first
    assert registry.actor_class("Scooter") is again


def test_the_demo_and_the_chaos_workload_each_keep_their_order() -> None:
    # Both imported in one process, as when the whole suite runs
    assert registry.actor_class("Order") is demo.Order
    assert registry.actor_class("ChaosOrder") is chaos_workload.Order
    assert registry.type_name(chaos_workload.Order) == "ChaosOrder"
