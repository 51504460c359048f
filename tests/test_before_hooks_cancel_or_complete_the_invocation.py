"""The ``before`` hook may cancel or complete the invocation: a cancelled action creates
nothing, and fails the parent step when nested; a nested action completed in ``before``
(inbound or outbound) concludes the parent step successfully without being admitted.

Spec §8 cases 27-30 (test/models/stepped/action_test.rb). Stepped's
``ActionJob.perform_now`` is ``engine.now``; its ``perform_enqueued_jobs(only: ActionJob)``
is ``testing.perform_enqueued()`` and ``perform_enqueued_jobs_recursively`` is
``testing.drain()``. Jobs commit in their own sessions, so ``reread(session)`` ends the test
session's snapshot and expires what it holds before the rows are read again.
"""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import StepContext, testing
from engine.models import Action, Step
from tests.action_helpers import no_change, reread
from tests.conftest import Counts
from tests.domain import Car


def last_actions(session: Session, count: int) -> list[Action]:
    """The ``count`` most recently admitted actions, oldest first (Stepped's ``Action.last(n)``)."""
    newest = session.scalars(select(Action).order_by(Action.id.desc()).limit(count)).all()
    return list(reversed(newest))


def define_cancelled_drive() -> None:
    cancelled_drive = engine.define(Car, "cancelled_drive")

    @cancelled_drive.before
    def cancel(car: Car, action: Action) -> None:
        action.cancel()

    @cancelled_drive.step
    def never(car: Car, step: StepContext) -> None:
        raise AssertionError("This should not be reached")


def test_cancelling_an_action_in_its_before_hook_creates_nothing(car: Car, counts: Counts) -> None:
    """Spec §8 case 27: cancelling action in before block. Nothing is admitted (DESIGN: the
    invocation record keeps the outcome; no action, step, lane or achievement row)."""
    define_cancelled_drive()

    # When it is performed now
    action = engine.now(car, "cancelled_drive")

    # Then it ends cancelled and no row was created in any of the four tables
    assert action.status == "cancelled"
    assert action.id is None
    assert counts.delta() == no_change()


def test_cancelling_a_nested_action_in_its_before_hook_fails_the_parent_step(
    session: Session, car: Car, counts: Counts
) -> None:
    """Spec §8 case 28: cancelling nested action in before block completes parent step as
    failed. Two actions are admitted: the trip and the honk; the cancelled drive never is."""
    define_cancelled_drive()
    failed_trip = engine.define(Car, "failed_trip")

    @failed_trip.step
    def honk_then_drive(car: Car, step: StepContext) -> None:
        step.do("honk")
        step.do("cancelled_drive")

    # When the trip is performed now
    parent = engine.now(car, "failed_trip")
    assert parent.name == "failed_trip"
    assert len(parent.steps) == 1

    # And its children are performed
    testing.drain()

    # Then the honk ran, the cancelled drive failed the step, and the step the trip
    assert counts.delta() == no_change(actions=2, steps=2)
    reread(session)
    assert car.honks == 1
    assert parent.status == "failed"
    assert parent.steps[-1].status == "failed"


@pytest.mark.parametrize("outbound", [False, True], ids=["inbound", "outbound"])
def test_completing_a_nested_action_in_its_before_hook_concludes_the_parent_step_successfully(
    session: Session, car: Car, counts: Counts, outbound: bool
) -> None:
    """Spec §8 cases 29 and 30: completing nested action (outbound: false / true) in before
    block. Despite Stepped's title ("... completes parent step as failed"), its assertions,
    kept here, say the step succeeds. A completion in ``before`` skips the outbound
    behaviour: the action is never admitted, so it never waits for an outside completion."""
    complete_early = engine.define(Car, "complete_early", outbound=outbound)

    @complete_early.before
    def complete_at_once(car: Car, action: Action) -> None:
        action.complete()

    @complete_early.step
    def never(car: Car, step: StepContext) -> None:
        raise AssertionError("This should not be reached")

    trip = engine.define(Car, "trip")

    @trip.step
    def honk_then_complete_early(car: Car, step: StepContext) -> None:
        step.do("honk")
        step.do("complete_early")

    # When the trip is performed now
    assert engine.now(car, "trip")

    # Then its step waits on both children
    assert counts.delta() == no_change(actions=1, steps=1, performances=1)
    step = session.scalars(select(Step).order_by(Step.id.desc()).limit(1)).one()
    assert step.status == "performing"
    assert step.pending_actions_count == 2
    assert step.unsuccessful_actions_count == 0

    # When the children are performed
    testing.drain()

    # Then only the honk was admitted, and the step and the trip succeeded
    assert counts.delta() == no_change(actions=1, steps=1, performances=-1)
    reread(session)
    assert car.honks == 1
    assert step.status == "succeeded"
    assert step.pending_actions_count == 0
    assert step.unsuccessful_actions_count == 0
    assert [(a.name, a.status) for a in last_actions(session, 2)] == [
        ("trip", "succeeded"),
        ("honk", "succeeded"),
    ]
