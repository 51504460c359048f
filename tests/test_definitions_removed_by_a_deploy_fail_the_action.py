"""Given an action in flight whose definition a deploy removed, or shortened below the step
it is at, when its next step would run, then the action fails visibly, with an error that
names it and says what happened, and its tree above fails with it. It is not left
performing for the sweeper to send again forever.

Not a spec case (issue 9; review 2.2). A deploy is simulated by changing the registry
between two messages: ``tour`` waits for an outbound child in its first step, and an
operator completes that child (an operator command sends the next step's body to the
workers instead of running it, so the deploy can land in between).
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import commands, registry, testing
from engine.models import Action, ActionEvent
from engine.sweeper import GRACE, SweepReport, sweep
from tests.domain import Car


def define_tour() -> engine.Definition:
    """``tour`` drives to the paint shop (an outbound move) in its first step, then honks in
    its second; ``trip`` runs a tour as its child."""
    engine.define(Car, "change_location", outbound=True)
    tour = engine.define(Car, "tour")

    @tour.step
    def order(car: Car, step: engine.StepContext) -> None:
        step.do("change_location", "paint shop")

    @tour.step
    def celebrate(car: Car, step: engine.StepContext) -> None:
        car.honk()

    trip = engine.define(Car, "trip")

    @trip.step
    def go(car: Car, step: engine.StepContext) -> None:
        step.do("tour")

    return tour


def start_trip(session: Session, car: Car) -> tuple[Action, Action, Action]:
    """The trip, its tour and the tour's move, which waits to be completed."""
    trip = engine.now(car, "trip")
    testing.drain()
    session.expire_all()
    named = {action.name: action for action in session.scalars(select(Action))}
    tour, move = named["tour"], named["change_location"]
    assert (trip.status, tour.status, move.status) == ("performing", "performing", "performing")
    return trip, tour, move


def reloaded(session: Session, *actions: Action) -> list[Action]:
    session.expire_all()
    return [session.get(Action, action.id) for action in actions]  # type: ignore[misc]


def nothing_left_to_sweep() -> bool:
    testing.travel(2 * GRACE)
    with engine.new_session() as session:
        return sweep(session) == SweepReport()


def test_an_action_whose_next_step_a_deploy_removed_fails_naming_the_step(session: Session, car: Car) -> None:
    # Given a tour whose second step was sent to a worker, and a deploy that left tour
    # one step only before the worker ran it
    define_tour()
    trip, tour, move = start_trip(session, car)
    commands.complete(move.id)
    shorter = engine.define(Car, "tour")

    @shorter.step
    def order(car: Car, step: engine.StepContext) -> None:
        step.do("change_location", "paint shop")

    # When the worker runs the step
    testing.drain()

    # Then the tour failed at that step, saying why and what to do
    trip, tour = reloaded(session, trip, tour)
    assert tour.status == "failed"
    assert tour.error_class == "engine.errors.DefinitionChanged"
    assert tour.error_message is not None
    assert f"action {tour.id} (tour on Car/{car.id}) is at step 2, but its definition now has 1" in (
        tour.error_message
    )
    assert [step.status for step in tour.steps] == ["succeeded", "failed"]
    [failed] = session.scalars(select(ActionEvent).where(ActionEvent.event == "step_failed"))
    assert (failed.action_id, failed.step_id) == (tour.id, tour.steps[1].id)

    # and the trip above failed with it, and nothing honked
    assert trip.status == "failed"
    session.refresh(car)
    assert car.honks == 0
    assert nothing_left_to_sweep()


def test_an_action_whose_definition_a_deploy_removed_fails_when_its_step_concludes(
    session: Session, car: Car
) -> None:
    # Given a tour waiting for its move in its first step, and a deploy that removed tour altogether
    define_tour()
    trip, tour, move = start_trip(session, car)
    registry.remove(Car, "tour")

    # When the move is completed
    commands.complete(move.id)
    testing.drain()

    # Then the tour failed, naming the action that no longer exists, and the trip with it
    trip, tour = reloaded(session, trip, tour)
    assert (tour.status, tour.error_class) == ("failed", "engine.errors.UnknownAction")
    assert "Car has no action 'tour'" in (tour.error_message or "")
    assert trip.status == "failed"
    assert nothing_left_to_sweep()


def test_an_action_whose_definition_a_deploy_removed_fails_when_its_next_step_runs(
    session: Session, car: Car
) -> None:
    # Given a tour whose second step was sent to a worker, and a deploy that removed tour
    # before the worker ran it
    define_tour()
    trip, tour, move = start_trip(session, car)
    commands.complete(move.id)
    registry.remove(Car, "tour")

    # When the worker runs the step
    testing.drain()

    # Then the tour failed at that step, and its failed callbacks, gone with it, are skipped
    trip, tour = reloaded(session, trip, tour)
    assert (tour.status, tour.error_class) == ("failed", "engine.errors.UnknownAction")
    assert [step.status for step in tour.steps] == ["succeeded", "failed"]
    assert trip.status == "failed"
    assert nothing_left_to_sweep()
