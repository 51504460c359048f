"""Errors raised by user code: handled ones fail the step and the action (and the tree
above); unhandled ones propagate out of ``engine.now`` and leave the action performing.

Spec §8 cases 59-67 (test/models/stepped/action_exceptions_test.rb). ``Car.breakdown``
raises ``RuntimeError("breakdown")``. Like Stepped's tests, no exception is handled unless
a test says ``testing.handle_exceptions()``.

Beyond Stepped (DESIGN invariant 8): a handled error is stored on the row that failed, as
``error_class``, ``error_message`` and ``error_traceback``; an invocation that fails
before it is admitted (its ``before`` hook raised) keeps the error on the unsaved action it
returns and on its invocation record.
"""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import testing
from tests.conftest import Counts
from tests.domain import Car

NOTHING = {"actions": 0, "steps": 0, "performances": 0, "achievements": 0}


def actions_named(session: Session, name: str) -> list[engine.Action]:
    session.expire_all()
    return list(session.scalars(select(engine.Action).where(engine.Action.name == name).order_by("id")))


def assert_error_stored(row: engine.Action | engine.Invocation, message: str) -> None:
    """The row names the RuntimeError user code raised (DESIGN invariant 8)."""
    assert row.error_class == "builtins.RuntimeError"
    assert row.error_message == message
    if isinstance(row, engine.Action):
        assert row.error_traceback is not None
        assert f"RuntimeError: {message}" in row.error_traceback


def test_a_handled_exception_in_a_direct_method_call_fails_the_action(
    session: Session, car: Car, counts: Counts
) -> None:
    """Spec §8 case 59: exception in direct method call with error raising disabled."""
    # Given breakdown is not declared (a plain method call) and exceptions are handled
    with testing.handle_exceptions():
        # When it is performed
        action = engine.now(car, "breakdown")

    # Then the action and its one step were created; the lane came and went
    assert counts.delta() == {"actions": 1, "steps": 1, "performances": 0, "achievements": 0}
    session.refresh(action)
    assert action.status == "failed"
    assert action.started_at is not None
    assert action.completed_at is not None
    assert car.honks == 0
    # and the error is stored on the failed action
    assert_error_stored(action, "breakdown")


def test_a_handled_exception_in_a_declared_method_runs_the_failed_callback(
    session: Session, car: Car, counts: Counts
) -> None:
    """Spec §8 case 60: exception in direct method call with definition with failed
    callback with error raising disabled."""
    # Given breakdown is declared with a failed callback that honks
    breakdown = engine.define(Car, "breakdown")

    @breakdown.failed
    def honk_on_failure(car: Car, action: engine.Action) -> None:
        car.honk()

    # When it is performed with exceptions handled
    with testing.handle_exceptions():
        action = engine.now(car, "breakdown")

    # Then it failed and its failed callback ran once
    session.refresh(action)
    session.refresh(car)
    assert action.status == "failed"
    assert car.honks == 1
    assert_error_stored(action, "breakdown")


def test_a_handled_exception_in_a_nested_action_fails_the_parent_and_runs_its_failed_callback(
    session: Session, car: Car, counts: Counts
) -> None:
    """Spec §8 case 61: exception in a nested action with error raising disabled and
    failed callback."""
    # Given breakdown_wrapped runs breakdown as a child and honks when it fails
    wrapped = engine.define(Car, "breakdown_wrapped")

    @wrapped.step
    def break_down(car: Car, step: engine.StepContext) -> None:
        step.do("breakdown")

    @wrapped.failed
    def honk_on_failure(car: Car, action: engine.Action) -> None:
        car.honk()

    with testing.handle_exceptions():
        # When it is performed
        parent = engine.now(car, "breakdown_wrapped")

        # Then it performs, waiting on its child, whose admission is queued
        assert counts.delta() == {"actions": 1, "steps": 1, "performances": 1, "achievements": 0}
        assert len(testing.enqueued("stepwise.admit")) == 1

        # When the child is performed
        assert testing.perform_enqueued() == 1

    # Then the child failed, which failed the parent's step and the parent
    assert counts.delta() == {"actions": 1, "steps": 1, "performances": -1, "achievements": 0}
    (nested,) = actions_named(session, "breakdown")
    assert nested.status == "failed"
    assert nested.started_at is not None
    assert nested.completed_at is not None
    assert_error_stored(nested, "breakdown")
    (nested_step,) = nested.steps
    assert nested_step.status == "failed"
    session.refresh(parent)
    assert parent.status == "failed"
    assert parent.started_at is not None
    assert parent.completed_at is not None
    # and only the parent's failed callback honked
    session.refresh(car)
    assert car.honks == 1


def test_an_exception_in_a_failed_callback_leaves_the_parent_failed(
    session: Session, car: Car, counts: Counts
) -> None:
    """Spec §8 case 62: exception in failed callback. The callback's own error is stored
    on the parent it ran for (DESIGN invariant 8) and counted as a failed callback."""
    # Given breakdown_wrapped's failed callback honks and then raises
    wrapped = engine.define(Car, "breakdown_wrapped")

    @wrapped.step
    def break_down(car: Car, step: engine.StepContext) -> None:
        step.do("breakdown")

    @wrapped.failed
    def honk_then_raise(car: Car, action: engine.Action) -> None:
        car.honk()
        raise RuntimeError("failed callback")

    # When it is performed with its child, exceptions handled
    with testing.handle_exceptions():
        parent = engine.now(car, "breakdown_wrapped")
        assert testing.perform_enqueued() == 1

    # Then the child, its step and the parent all failed
    (nested,) = actions_named(session, "breakdown")
    assert nested.status == "failed"
    assert_error_stored(nested, "breakdown")
    (nested_step,) = nested.steps
    assert nested_step.status == "failed"
    session.refresh(parent)
    session.refresh(car)
    assert car.honks == 1
    # and the parent stays failed, with the callback's error stored on it
    assert parent.status == "failed"
    assert parent.after_callbacks_failed_count == 1
    assert_error_stored(parent, "failed callback")


def test_an_exception_in_a_succeeded_callback_keeps_the_status_but_grants_no_achievement(
    session: Session, car: Car, counts: Counts
) -> None:
    """Spec §8 case 63: exception in succeeded callback doesn't change action status and
    doesn't generate Achievement."""
    # Given honk has a checksum and a succeeded callback that raises
    honk = engine.define(Car, "honk", checksum=lambda car: "a")

    @honk.succeeded
    def raise_on_success(car: Car, action: engine.Action) -> None:
        raise RuntimeError("succeeded callback")

    # When it is performed with exceptions handled
    with testing.handle_exceptions():
        action = engine.now(car, "honk")

    # Then no achievement was granted
    assert counts.delta()["achievements"] == 0
    # and the action succeeded, though not including its callbacks
    session.refresh(action)
    session.refresh(car)
    assert action.status == "succeeded"
    assert action.succeeded_including_callbacks is False
    assert car.honks == 1
    assert action.after_callbacks_succeeded_count is None
    assert action.after_callbacks_failed_count == 1
    assert_error_stored(action, "succeeded callback")


def test_an_unhandled_exception_propagates_and_leaves_the_action_performing(
    session: Session, car: Car, counts: Counts
) -> None:
    """Spec §8 case 64: exception in direct method call with error raising enabled. The
    error propagates out of ``engine.now``; the step's transaction rolls back, so the
    action stays performing in its lane with its step open (the tree is stuck, as in
    Stepped; the caller, or Dramatiq's retry, sees the exception)."""
    # Given no exception is handled (the test default)
    # When breakdown is performed, Then its error reaches the caller
    with pytest.raises(RuntimeError, match="breakdown"):
        engine.now(car, "breakdown")

    # and the admitted action, its lane and its step are left behind
    assert counts.delta() == {"actions": 1, "steps": 1, "performances": 1, "achievements": 0}
    (action,) = actions_named(session, "breakdown")
    assert action.status == "performing"
    assert action.started_at is not None
    assert action.completed_at is None


def test_an_action_that_fails_without_a_checksum_erases_its_achievement(
    session: Session, car: Car, counts: Counts
) -> None:
    """Spec §8 case 65: action that fails without checksum deletes its Achievement record."""
    # Given an achievement under breakdown's tenancy key
    key = f"Car/{car.id}/breakdown"
    session.add(engine.Achievement(checksum_key=key, checksum=engine.checksum("seeded")))
    session.commit()
    counts.delta()

    # When breakdown is performed with exceptions handled
    with testing.handle_exceptions():
        action = engine.now(car, "breakdown")

    # Then the action failed, and starting it erased the achievement
    assert counts.delta() == {"actions": 1, "steps": 1, "performances": 0, "achievements": -1}
    session.refresh(action)
    assert action.status == "failed"
    assert_error_stored(action, "breakdown")
    session.expire_all()
    assert (
        session.scalars(select(engine.Achievement).where(engine.Achievement.checksum_key == key)).all() == []
    )


def test_an_exception_in_before_halts_the_invocation(session: Session, car: Car, counts: Counts) -> None:
    """Spec §8 case 66: before block exception is captured and halts action creation.
    Nothing is admitted, so the error is kept on the unsaved action returned and on the
    invocation record."""
    # Given breakdown's before hook raises
    breakdown = engine.define(Car, "breakdown")

    @breakdown.before
    def refuse(car: Car, action: engine.Action) -> None:
        raise RuntimeError("before")

    # When it is performed with exceptions handled
    with testing.handle_exceptions():
        action = engine.now(car, "breakdown")

    # Then nothing was created, and the returned action says it failed, and why
    assert counts.delta() == NOTHING
    assert action.id is None
    assert action.status == "failed"
    assert_error_stored(action, "before")
    (invocation,) = session.scalars(select(engine.Invocation))
    assert invocation.outcome == "failed"
    assert_error_stored(invocation, "before")


def test_an_exception_in_a_nested_before_fails_the_parent(session: Session, car: Car, counts: Counts) -> None:
    """Spec §8 case 67: before block exception in nested action fails the parent action.
    The child is never admitted; its error stays on its invocation record."""
    # Given breakdown's before hook raises, and wrap_breakdown runs breakdown as a child
    breakdown = engine.define(Car, "breakdown")

    @breakdown.before
    def refuse(car: Car, action: engine.Action) -> None:
        raise RuntimeError("before")

    wrap = engine.define(Car, "wrap_breakdown")

    @wrap.step
    def break_down(car: Car, step: engine.StepContext) -> None:
        step.do("breakdown")

    # When it is performed with its child, exceptions handled
    with testing.handle_exceptions():
        parent = engine.now(car, "wrap_breakdown")
        testing.drain()

    # Then only the parent and its step were created
    assert counts.delta() == {"actions": 1, "steps": 1, "performances": 0, "achievements": 0}
    session.refresh(parent)
    assert parent.status == "failed"
    (step,) = parent.steps
    assert step.status == "failed"
    (invocation,) = session.scalars(select(engine.Invocation).where(engine.Invocation.name == "breakdown"))
    assert invocation.outcome == "failed"
    assert_error_stored(invocation, "before")
