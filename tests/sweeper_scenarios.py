"""Lost work for the sweeper's tests, and the sweeper run as its command runs it.

A lost message is ``dramatiq.get_broker().flush_all()`` after the commit. A worker killed in
a step body leaves a step that was opened and never run (``open_without_running``): its
transaction rolled back, and on PostgreSQL its row lock (its lease) went with its
connection. The clock is frozen at ``T`` by the autouse fixture ``frozen``, which the test
modules import.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

import dramatiq
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import StepContext, sweeper, testing
from engine.admission import admit_recording_errors
from engine.models import Action, ActionEvent, Invocation
from engine.sweeper import SweepReport
from tests.domain import Car

T = datetime(2025, 1, 2, 3, 4, 5)
SECOND = timedelta(seconds=1)


@pytest.fixture(autouse=True)
def frozen() -> Iterator[None]:
    testing.freeze(T)
    yield


def lose_messages() -> None:
    dramatiq.get_broker().flush_all()


def sweep(**options: timedelta | int) -> SweepReport:
    with engine.new_session() as session:
        return sweeper.sweep(session, **options)  # type: ignore[arg-type]


def recovered(session: Session) -> list[ActionEvent]:
    query = select(ActionEvent).where(ActionEvent.event == "recovered").order_by(ActionEvent.id)
    return list(session.scalars(query))


def reloaded(session: Session, action: Action) -> Action:
    session.expire_all()
    found = session.get(Action, action.id)
    assert found is not None
    return found


def define_park(seconds: int = 60) -> None:
    """``park`` waits ``seconds`` in its first step, then moves the car to the garage."""
    park = engine.define(Car, "park")

    @park.step
    def wait(car: Car, step: StepContext) -> None:
        step.wait(seconds)

    @park.step
    def arrive(car: Car, step: StepContext) -> None:
        car.location = "garage"


def define_outbound_move() -> None:
    """``change_location`` stays performing until completed from outside, for 5 seconds."""
    engine.define(Car, "change_location", outbound=True, timeout=timedelta(seconds=5))


def open_without_running(session: Session, car: Car, name: str, *args: object) -> Invocation:
    """A worker admitted the invocation and opened its first step, then was killed before
    the step's body ran: nothing of the body was committed."""
    invocation = engine.later(car, name, *args)
    session.commit()
    with engine.new_session() as worker:
        admit_recording_errors(worker, invocation.id)  # the body would run now: it never does
    lose_messages()
    return invocation
