"""Approvals are signals ("approved" / "rejected") with who and why: a step that waits for
one branches on the operator's answer, and a late approval starts its reminder action once
(none when answered in time; a reminder must name an action and come with its delay)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import testing
from engine.models import Action, ActionEvent
from tests.domain import Car
from tests.signal_scenarios import start


def test_an_approval_step_branches_on_the_operators_answer(session: Session, car: Car) -> None:
    # Given a refund that waits for approval, then pays or closes
    taken: list[str] = []
    refund = engine.define(Car, "refund")

    @refund.step
    def ask(car: Car, step: engine.StepContext, amount: int) -> None:
        step.wait_for_approval(timeout=timedelta(days=1))

    @refund.step
    def decide(car: Car, step: engine.StepContext, amount: int) -> None:
        answer = step.signal
        step.go_to("pay" if answer is not None and answer.name == "approved" else "close")

    @refund.step
    def pay(car: Car, step: engine.StepContext, amount: int) -> None:
        taken.append(f"paid {amount}")
        step.finish("paid")

    @refund.step
    def close(car: Car, step: engine.StepContext, amount: int) -> str:
        taken.append("closed")
        return "closed"

    invocation = engine.later(car, "refund", 25)
    session.commit()
    testing.drain()
    session.refresh(invocation)
    action = session.get(Action, invocation.action_id)
    assert action is not None

    # When it is rejected
    testing.send_signal(action, "rejected", by="cfo", note="duplicate")

    # Then it took the closing branch
    session.refresh(action)
    assert taken == ["closed"]
    assert engine.result_of(action) == "closed"


def declare_expense(reminded: list[int]) -> None:
    expense = engine.define(Car, "expense")

    @expense.step
    def ask(car: Car, step: engine.StepContext) -> None:
        step.wait_for_approval(timeout=timedelta(hours=8), remind_after=timedelta(hours=1), reminder="nudge")

    @expense.step
    def after(car: Car, step: engine.StepContext) -> None:
        pass

    engine.define(Car, "nudge", lambda car, action_id: reminded.append(action_id))


def test_a_late_approval_starts_its_reminder_once(session: Session, car: Car) -> None:
    # Given an expense waiting for approval, with a reminder after an hour
    testing.freeze()
    reminded: list[int] = []
    declare_expense(reminded)
    action = start(session, car, "expense")

    # When the hour passes without an answer, and more time after it
    testing.travel(timedelta(minutes=61))
    testing.drain()
    testing.travel(timedelta(minutes=61))
    testing.drain()

    # Then the reminder action ran once, with the action's id, and the history says so
    assert reminded == [action.id]
    events = session.scalars(
        select(ActionEvent.event).where(ActionEvent.action_id == action.id, ActionEvent.event == "reminded")
    ).all()
    assert events == ["reminded"]
    session.refresh(action)
    assert action.status == "performing"  # still waiting for its answer


def test_an_approval_answered_in_time_needs_no_reminder(session: Session, car: Car) -> None:
    testing.freeze()
    reminded: list[int] = []
    declare_expense(reminded)
    action = start(session, car, "expense")
    testing.send_signal(action, "approved")
    testing.travel(timedelta(hours=2))
    testing.drain()
    assert reminded == []
    session.refresh(action)
    assert action.status == "succeeded"


def test_a_reminder_must_name_an_action_and_come_with_its_delay(session: Session, car: Car) -> None:
    odd = engine.define(Car, "odd")

    @odd.step
    def ask(car: Car, step: engine.StepContext) -> None:
        step.wait_for_approval(reminder="nudge")

    with pytest.raises(engine.ArgumentError, match="remind_after and reminder together"):
        engine.now(car, "odd")
