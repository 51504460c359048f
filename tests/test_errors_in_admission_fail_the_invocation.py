"""Given an invocation whose key, checksum or timeout cannot be computed (its callable
raises, or the key is longer than a key column holds), when it is admitted, then it fails
visibly: never admitted, its error stored on the invocation, an event in its parent's
history, and its parent step concluded unsuccessfully. It is not left for the sweeper to
send again forever.

Not a spec case (issue 9; review 2.2): Stepped evaluates these in the caller. Like the
``before`` hook (test_errors_in_user_code.py), a handled error fails the invocation and an
unhandled one propagates; production handles every Exception.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import testing
from engine.models import ActionEvent, Invocation
from engine.sweeper import GRACE, SweepReport, sweep
from tests.conftest import Counts
from tests.domain import Car


def broken(option: str) -> Any:
    def compute(car: Car, *arguments: Any) -> Any:
        raise RuntimeError(f"no {option} today")

    return compute


def define_visit_of_honk(**options: Any) -> None:
    """``visit`` starts ``honk`` (declared with ``options``) in its one step."""
    engine.define(Car, "honk", **options)
    visit = engine.define(Car, "visit")

    @visit.step
    def go(car: Car, step: engine.StepContext) -> None:
        step.do("honk")


def honk_invocation(session: Session) -> Invocation:
    session.expire_all()
    return session.scalars(select(Invocation).where(Invocation.name == "honk")).one()


def nothing_left_to_sweep() -> bool:
    testing.travel(2 * GRACE)
    with engine.new_session() as session:
        return sweep(session) == SweepReport()


@pytest.mark.parametrize("option", ["concurrency_key", "checksum_key", "checksum", "timeout"])
def test_an_error_in_a_key_checksum_or_timeout_callable_fails_the_invocation_and_its_parent(
    session: Session, car: Car, counts: Counts, option: str
) -> None:
    # Given honk's option raises, and visit starts honk in its step
    define_visit_of_honk(**{option: broken(option)})

    # When visit is performed with its child, exceptions handled (as in production)
    with testing.handle_exceptions():
        parent = engine.now(car, "visit")
        testing.drain()

    # Then honk was never admitted, and its invocation keeps the error
    assert counts.delta() == {"actions": 1, "steps": 1, "performances": 0, "achievements": 0}
    invocation = honk_invocation(session)
    assert (invocation.outcome, invocation.settled_at is not None) == ("failed", True)
    assert invocation.error_class == "builtins.RuntimeError"
    assert invocation.error_message == f"no {option} today"
    session.refresh(car)
    assert car.honks == 0

    # and the parent's history says so
    [event] = session.scalars(select(ActionEvent).where(ActionEvent.event == "invocation_failed"))
    assert (event.action_id, event.invocation_id) == (parent.id, invocation.id)
    assert event.data["error_class"] == "builtins.RuntimeError"

    # and the parent step concluded unsuccessfully, which failed the parent
    session.refresh(parent)
    assert parent.status == "failed"
    assert [step.status for step in parent.steps] == ["failed"]

    # and nothing is left for the sweeper to send again
    assert nothing_left_to_sweep()


@pytest.mark.parametrize("option", ["concurrency_key", "checksum_key"])
def test_a_key_longer_than_a_key_column_fails_the_invocation(
    session: Session, car: Car, counts: Counts, option: str
) -> None:
    """SQLite would store it; PostgreSQL refuses the row, and then the admission failed the
    same way on every delivery."""
    # Given honk's key is computed from its argument, which is 300 characters long
    engine.define(Car, "honk", **{option: lambda car, tune: f"tunes/{tune}"})
    visit = engine.define(Car, "visit")

    @visit.step
    def go(car: Car, step: engine.StepContext) -> None:
        step.do("honk", "la" * 150)

    # When visit is performed with its child
    with testing.handle_exceptions():
        parent = engine.now(car, "visit")
        testing.drain()

    # Then honk failed before it was admitted, saying which key is too long and by how much
    assert counts.delta() == {"actions": 1, "steps": 1, "performances": 0, "achievements": 0}
    invocation = honk_invocation(session)
    assert (invocation.outcome, invocation.error_class) == ("failed", "engine.errors.ArgumentError")
    assert invocation.error_message is not None
    assert f"{option} of Car.honk is 306 characters long" in invocation.error_message
    session.refresh(parent)
    assert parent.status == "failed"
    assert nothing_left_to_sweep()


def test_a_root_invocation_whose_timeout_callable_raises_ends_failed(
    session: Session, car: Car, counts: Counts
) -> None:
    # Given honk's timeout callable raises
    engine.define(Car, "honk", timeout=broken("timeout"))

    # When it is performed
    with testing.handle_exceptions():
        action = engine.now(car, "honk")

    # Then nothing was admitted, and the unsaved action and the invocation say why
    assert counts.delta() == {"actions": 0, "steps": 0, "performances": 0, "achievements": 0}
    assert (action.id, action.status, action.error_message) == (None, "failed", "no timeout today")
    invocation = honk_invocation(session)
    assert (invocation.outcome, invocation.error_message) == ("failed", "no timeout today")
    assert nothing_left_to_sweep()


def test_an_unhandled_error_in_a_key_callable_propagates_and_is_stored_on_the_invocation(
    session: Session, car: Car
) -> None:
    # Given honk's concurrency key raises, and no exception is handled (the test default)
    engine.define(Car, "honk", concurrency_key=broken("concurrency_key"))

    # When it is performed, Then the error reaches the caller
    with pytest.raises(RuntimeError, match="no concurrency_key today"):
        engine.now(car, "honk")

    # and the invocation, still unsettled, keeps it
    invocation = honk_invocation(session)
    assert (invocation.settled_at, invocation.error_message) == (None, "no concurrency_key today")
