"""Compensation after a cancel: cancelling a tree compensates it from the leaves up. The
cancelled root waits for its child to compensate (its step keeps waiting on it) before its
own compensations run; each action ends ``cancelled`` with "compensated" in its history."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import StepContext, commands, testing
from engine.models import Action, ActionEvent
from tests.domain import Car


def declare_trip(journal: list[str]) -> None:
    """A trip books a hotel, then makes a leg; the leg reserves a seat, then drives (an
    outbound action: it is still driving when the trip is cancelled)."""
    engine.define(Car, "unbook", lambda car, hotel: journal.append(f"unbook {hotel}"))
    engine.define(Car, "unreserve", lambda car, seat: journal.append(f"unreserve {seat}"))
    engine.define(Car, "drive_leg", lambda car: None, outbound=True)
    leg = engine.define(Car, "leg")

    @leg.step
    def reserve(car: Car, step: StepContext) -> None:
        step.compensate("unreserve", "12A")

    @leg.step
    def drive(car: Car, step: StepContext) -> None:
        step.do("drive_leg")

    trip = engine.define(Car, "trip")

    @trip.step
    def book(car: Car, step: StepContext) -> None:
        step.compensate("unbook", "Hotel Bristol")

    @trip.step
    def go(car: Car, step: StepContext) -> None:
        step.do("leg")


def test_cancelling_a_tree_runs_the_leafs_compensations_before_the_roots(session: Session, car: Car) -> None:
    # Given a trip whose leg is driving
    journal: list[str] = []
    declare_trip(journal)
    invocation = engine.later(car, "trip")
    session.commit()
    testing.drain()
    session.refresh(invocation)
    trip_id = invocation.action_id
    assert trip_id is not None
    assert session.scalars(select(Action.status).where(Action.name == "drive_leg")).one() == "performing"

    # When an operator cancels the trip
    result = commands.cancel(trip_id, by="ops@example.com", reason="customer called")
    assert result.ok, result

    # Then, right away, the trip and its leg are compensating (the trip waits for its leg)
    session.expire_all()
    statuses = {name: state for name, state in session.execute(select(Action.name, Action.status))}
    assert statuses["trip"] == "compensating"
    assert statuses["leg"] == "compensating"
    assert statuses["drive_leg"] == "cancelled"

    # And once the work runs, the leg's seat is unreserved before the trip's hotel is unbooked
    testing.drain()
    assert journal == ["unreserve 12A", "unbook Hotel Bristol"]
    session.expire_all()
    statuses = {name: state for name, state in session.execute(select(Action.name, Action.status))}
    assert statuses["trip"] == statuses["leg"] == "cancelled"
    for name in ("trip", "leg"):
        action_id = session.scalars(select(Action.id).where(Action.name == name)).one()
        history = list(
            session.scalars(
                select(ActionEvent.event).where(ActionEvent.action_id == action_id).order_by(ActionEvent.id)
            )
        )
        assert history.index("compensating") < history.index("compensated") < history.index("completed")
    # And the cancel's cause and who sent it are on the trip's history
    compensating = session.scalars(
        select(ActionEvent).where(ActionEvent.action_id == trip_id, ActionEvent.event == "compensating")
    ).one()
    assert (compensating.cause, compensating.by, compensating.data["status"]) == (
        "operator",
        "ops@example.com",
        "cancelled",
    )


def test_a_cancelled_action_without_compensations_ends_cancelled_at_once(session: Session, car: Car) -> None:
    # Given a leg with nothing to undo, driving
    engine.define(Car, "drive_leg", lambda car: None, outbound=True)
    engine.define(Car, "plain_leg").step(lambda car, step: step.do("drive_leg"))
    action = engine.now(car, "plain_leg")

    # When it is cancelled
    commands.cancel(action.id)

    # Then it is cancelled in the same transaction, as before compensation existed
    session.expire_all()
    assert session.get(Action, action.id).status == "cancelled"  # type: ignore[union-attr]
