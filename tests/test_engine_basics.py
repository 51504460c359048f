"""The engine's basics, like Stepped's sanity tests: it has a version, Action is a class,
any SQLAlchemy model can carry actions, and the example Car persists.

Spec §8 cases 1-5 (test/stepped_test.rb, test/models/sample_test.rb,
test/models/stepped_car_test.rb)."""

from __future__ import annotations

import importlib.metadata

import pytest
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

import engine
from engine import testing
from tests.conftest import Counts
from tests.domain import AppBase, Car


class PlainBase(DeclarativeBase):
    """A declarative base the engine has never heard of."""


class Bicycle(PlainBase):
    """An ordinary SQLAlchemy model: no ``engine.Actor`` mixin, no decorator."""

    __tablename__ = "basics_bicycles"

    id: Mapped[int] = mapped_column(primary_key=True)
    rings: Mapped[int] = mapped_column(default=0)

    def ring(self) -> None:
        self.rings += 1


@pytest.fixture
def bicycles(database: Engine) -> None:
    PlainBase.metadata.create_all(database)


def test_the_engine_has_a_version_number() -> None:
    """Spec §8 case 1: ``Stepped::VERSION`` is set; ours is ``engine.__version__``, the
    installed distribution's version."""
    assert engine.__version__
    assert engine.__version__ == importlib.metadata.version("stepwise")


def test_the_engine_model_action_is_a_class() -> None:
    """Spec §8 case 2: ``Stepped::Action`` is a class; ours is a mapped SQLAlchemy model."""
    assert isinstance(engine.Action, type)
    assert issubclass(engine.Action, engine.Base)
    assert engine.Action.__tablename__ == "stepwise_actions"


def test_the_example_car_is_a_model_of_the_application() -> None:
    """Spec §8 case 3 (inherits from ApplicationRecord): a sanity check on the example
    domain. Car is a model of the application's own declarative base, not the engine's."""
    assert issubclass(Car, AppBase)
    assert not issubclass(Car, engine.Base)
    assert Car.__tablename__ == "cars"


def test_any_plain_sqlalchemy_model_can_carry_actions(
    bicycles: None, session: Session, counts: Counts
) -> None:
    """Spec §8 case 4 (stepped_action class method has been included): in Stepped every
    model gets ``stepped_action``. Ours needs no mixin either: ``engine.define`` declares an
    action on any SQLAlchemy model, and the action runs on its rows, in this process
    (``now``) and on a worker (``later``)."""
    # Given an ordinary model that knows nothing of the engine
    assert not issubclass(Bicycle, engine.Actor)
    bicycle = Bicycle()
    session.add(bicycle)
    session.commit()

    # When an action is declared on it and invoked
    ring = engine.define(Bicycle, "ring")
    action = engine.now(bicycle, "ring")

    # Then it is registered for that class and runs like any other action
    assert isinstance(ring, engine.Definition)
    assert engine.registry.find(Bicycle, "ring") is ring
    assert action.status == "succeeded"
    assert (action.actor_type, action.actor_id, action.name) == ("Bicycle", str(bicycle.id), "ring")
    assert bicycle.rings == 1
    assert counts.delta() == {"actions": 1, "steps": 1, "performances": 0, "achievements": 0}

    # And a worker finds the row again from the stored reference
    engine.later(bicycle, "ring")
    session.commit()
    assert testing.drain() == 1
    session.refresh(bicycle)
    assert bicycle.rings == 2


def test_a_car_created_within_the_test_persists(session: Session) -> None:
    """Spec §8 case 5 (persists a namespaced car created within the test): the example
    domain's table exists on this backend and a Car row persists."""
    # Given a new car
    car = Car(location="garage")

    # When it is saved
    session.add(car)
    session.commit()

    # Then another session reads it back, with the column defaults
    with engine.new_session() as other:
        stored = other.get(Car, car.id)
        assert stored is not None
        assert (stored.mileage, stored.honks, stored.location) == (0, 0, "garage")
