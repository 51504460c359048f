"""Waits combine signals and timers: all-of waits for each signal before its deadline,
any-of takes whichever of a signal and the deadline comes first, and an all-of whose
deadline passes for the missing signal goes on with what came (the next step reads that
the deadline passed). Nothing holds a worker while a step waits."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy.orm import Session

import engine
from engine import testing
from engine.errors import SignalRefused
from tests.domain import Car
from tests.signal_scenarios import Seen, declare_deploy, start


def test_all_of_waits_for_each_signal_and_both_beat_their_deadline(session: Session, car: Car) -> None:
    # Given an order that ships once both payment and stock are confirmed, within an hour
    testing.freeze()
    seen: list[tuple[list[str], bool]] = []
    order = engine.define(Car, "order")

    @order.step
    def confirm(car: Car, step: engine.StepContext) -> None:
        step.wait_for_all("paid", "in_stock", timeout=3600)

    @order.step
    def ship(car: Car, step: engine.StepContext) -> None:
        seen.append(([s.name for s in step.received], step.deadline_passed))

    action = start(session, car, "order")

    # When only one arrives, the order still waits; when the other does, it ships
    testing.send_signal(action, "in_stock")
    session.refresh(action)
    assert action.status == "performing"
    testing.travel(timedelta(minutes=30))
    testing.send_signal(action, "paid")
    session.refresh(action)
    assert action.status == "succeeded"
    assert seen == [(["paid", "in_stock"], False)]  # in the order the step waited for them
    # And the deadlines that were not reached change nothing when they come
    testing.travel(timedelta(hours=2))
    testing.drain()
    assert len(seen) == 1


@pytest.mark.parametrize("winner", ["signal", "timer"])
def test_any_of_a_signal_and_a_deadline_whichever_comes_first(
    session: Session, car: Car, winner: str
) -> None:
    # Given a deployment waiting for approval for at most an hour
    testing.freeze()
    seen: Seen = []
    declare_deploy(seen, timeout=3600)
    action = start(session, car, "deploy")

    # When the approval comes in time, or the hour passes first
    if winner == "signal":
        testing.travel(timedelta(minutes=59))
        testing.send_signal(action, "approved")
        testing.travel(timedelta(minutes=2))
        testing.drain()
    else:
        testing.travel(timedelta(minutes=61))
        testing.drain()
        with pytest.raises(SignalRefused):
            testing.send_signal(action, "approved")  # too late: the action finished

    # Then the next step saw which one won, exactly once
    session.refresh(action)
    assert action.status == "succeeded"
    if winner == "signal":
        assert seen == [{"name": "approved", "payload": None, "by": None, "deadline": False}]
    else:
        assert seen == [{"name": None, "payload": None, "by": None, "deadline": True}]


def test_all_of_with_a_deadline_that_passes_for_the_missing_signal(session: Session, car: Car) -> None:
    # Given a step waiting for two signals, each for at most a minute
    testing.freeze()
    seen: list[tuple[list[str], bool]] = []
    pair = engine.define(Car, "pair")

    @pair.step
    def both(car: Car, step: engine.StepContext) -> None:
        step.wait_for_all("left", "right", timeout=60)

    @pair.step
    def after(car: Car, step: engine.StepContext) -> None:
        seen.append(([s.name for s in step.received], step.deadline_passed))

    action = start(session, car, "pair")

    # When one arrives and the minute passes for the other
    testing.send_signal(action, "left")
    testing.travel(timedelta(seconds=61))
    testing.drain()

    # Then the step went on with the one that came and knows a deadline passed
    assert seen == [(["left"], True)]
