"""Prometheus: ``stepwise_compensations_total`` counts the compensations started and
``stepwise_compensations_failed_total`` those that failed (monotonic counters, added to in
the transaction where it happens); ``stepwise_actions`` shows the compensating ones."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import StepContext, commands, metrics, testing
from engine.models import Action
from tests.domain import Car


def sample(text: str, name: str, labels: str = "") -> float:
    for line in text.splitlines():
        if line.startswith(f"{name}{labels} ") or (not labels and line.startswith(f"{name} ")):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no sample {name}{labels} in\n{text}")


def scrape() -> str:
    with engine.new_session() as fresh:
        return metrics.render(fresh)


def test_compensations_run_and_failed_are_counted(session: Session, car: Car) -> None:
    # Given a trip that books twice and then breaks down; one unbooking fails once
    tries = {"n": 0}

    def unbook(car: Car, hotel: str) -> None:
        tries["n"] += 1
        if hotel == "Bristol" and tries["n"] == 1:
            raise RuntimeError("the hotel does not answer")

    engine.define(Car, "unbook", unbook)
    trip = engine.define(Car, "trip")

    @trip.step
    def book(car: Car, step: StepContext) -> None:
        step.compensate("unbook", "Adlon")
        step.compensate("unbook", "Bristol")

    @trip.step
    def go(car: Car, step: StepContext) -> None:
        step.do("breakdown")

    with testing.handle_exceptions():
        action = engine.now(car, "trip")
        testing.drain()

    # Then one compensation ran and failed: the trip is compensating
    text = scrape()
    assert sample(text, "stepwise_compensations_total") == 1
    assert sample(text, "stepwise_compensations_failed_total") == 1
    assert sample(text, "stepwise_actions", '{name="trip",status="compensating"}') == 1

    # When an operator retries the failed unbooking
    failed = session.scalars(
        select(Action.id).where(Action.name == "unbook", Action.status == "failed")
    ).one()
    commands.retry(failed)
    testing.drain()

    # Then the second compensation is counted too, and nothing more failed
    text = scrape()
    assert sample(text, "stepwise_compensations_total") == 2
    assert sample(text, "stepwise_compensations_failed_total") == 1
    session.refresh(action)
    assert action.status == "failed"
