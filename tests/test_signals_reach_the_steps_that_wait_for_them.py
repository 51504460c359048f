"""Signals: a named, durable message to one action, kept in its inbox until a step that
waits for it consumes it, exactly once. Waits combine signals as any-of or all-of, with a
deadline; the next step reads what satisfied the wait. Nothing holds a worker while a step
waits; a signal to a finished action is refused and changes nothing."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import dramatiq
import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

import engine
from engine import sweeper, testing
from engine.errors import SignalRefused
from engine.models import Action, ActionEvent, Signal
from tests.domain import Car

Seen = list[dict[str, Any]]


def declare_deploy(
    seen: Seen, *, any_of: tuple[str, ...] = ("approved", "rejected"), timeout: float | None = None
) -> None:
    """A deployment that waits for a signal, then records what came."""
    deploy = engine.define(Car, "deploy")

    @deploy.step
    def ask(car: Car, step: engine.StepContext) -> None:
        step.wait_for(*any_of, timeout=timeout)

    @deploy.step
    def go(car: Car, step: engine.StepContext) -> str:
        signal = step.signal
        seen.append(
            {
                "name": signal.name if signal else None,
                "payload": signal.payload if signal else None,
                "by": signal.sent_by if signal else None,
                "deadline": step.deadline_passed,
            }
        )
        return signal.name if signal else "deadline"


def start(session: Session, car: Car, name: str) -> Action:
    invocation = engine.later(car, name)
    session.commit()
    testing.drain()
    session.refresh(invocation)
    action = session.get(Action, invocation.action_id)
    assert action is not None
    return action


def inbox(session: Session, action: Action) -> list[tuple[str, bool]]:
    session.expire_all()
    rows = session.scalars(select(Signal).where(Signal.action_id == action.id).order_by(Signal.id))
    return [(s.name, s.consumed_at is not None) for s in rows]


def test_a_waiting_step_takes_the_signal_and_the_next_step_reads_it(session: Session, car: Car) -> None:
    # Given a deployment waiting for approval
    seen: Seen = []
    declare_deploy(seen)
    action = start(session, car, "deploy")
    session.refresh(action)
    assert action.status == "performing"
    assert seen == []

    # When an operator approves it with a payload
    testing.send_signal(action, "approved", {"window": "tonight"}, by="ops@example.com", note="looks good")

    # Then the next step ran with that signal, and the action succeeded with its result
    session.refresh(action)
    assert action.status == "succeeded"
    assert seen == [
        {"name": "approved", "payload": {"window": "tonight"}, "by": "ops@example.com", "deadline": False}
    ]
    assert engine.result_of(action) == "approved"
    assert inbox(session, action) == [("approved", True)]


def test_a_signal_sent_before_the_wait_is_kept_and_consumed_by_it_once(session: Session, car: Car) -> None:
    # Given a flow whose first step takes a while (a child), then waits for "go"
    seen: Seen = []
    flow = engine.define(Car, "flow")

    @flow.step
    def prepare(car: Car, step: engine.StepContext) -> None:
        step.do("drive", 1)

    @flow.step
    def hold(car: Car, step: engine.StepContext) -> None:
        step.wait_for("go")

    @flow.step
    def run(car: Car, step: engine.StepContext) -> None:
        seen.append({"name": step.signal.name if step.signal else None})

    invocation = engine.later(car, "flow")
    session.commit()
    testing.perform_enqueued()  # admitted: its first step is ready, nothing waits yet
    session.refresh(invocation)
    action = session.get(Action, invocation.action_id)
    assert action is not None

    # When "go" arrives before any step waits for it
    engine.signal(action, "go")
    assert inbox(session, action) == [("go", False)]

    # Then the wait, once made, takes it at once, and only once
    testing.drain()
    session.refresh(action)
    assert action.status == "succeeded"
    assert seen == [{"name": "go"}]
    assert inbox(session, action) == [("go", True)]
    consumed = session.scalar(
        select(func.count())
        .select_from(ActionEvent)
        .where(ActionEvent.action_id == action.id, ActionEvent.event == "signal_consumed")
    )
    assert consumed == 1


def test_two_signals_to_one_wait_consume_one_and_keep_the_other(session: Session, car: Car) -> None:
    # Given a release waiting for approval or rejection, then for its rollout to be done
    answers: list[str] = []
    release = engine.define(Car, "release")

    @release.step
    def ask(car: Car, step: engine.StepContext) -> None:
        step.wait_for("approved", "rejected")

    @release.step
    def roll_out(car: Car, step: engine.StepContext) -> None:
        answers.append(step.signal.name if step.signal else "none")
        step.wait_for("done")

    action = start(session, car, "release")

    # When it is approved, then rejected
    engine.signal(action, "approved", by="alice")
    engine.signal(action, "rejected", by="bob")
    testing.drain()

    # Then the first one was consumed, and the second stays visible in the inbox
    assert answers == ["approved"]
    assert inbox(session, action) == [("approved", True), ("rejected", False)]
    session.refresh(action)
    assert action.status == "performing"


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


def test_a_signal_to_a_finished_action_is_refused_and_changes_nothing(session: Session, car: Car) -> None:
    # Given an action that already succeeded
    action = engine.now(car, "drive", 3)
    session.refresh(action)
    assert action.status == "succeeded"

    # When a signal is sent to it
    with pytest.raises(SignalRefused, match=r"is succeeded: a finished action takes no signals") as refused:
        engine.signal(action, "approved")

    # Then nothing was recorded
    assert refused.value.reason == "finished"
    assert inbox(session, action) == []


def test_a_signal_to_an_action_that_does_not_exist_is_refused(session: Session) -> None:
    with pytest.raises(SignalRefused, match="action 987654 does not exist") as refused:
        engine.signal(987654, "approved")
    assert refused.value.reason == "not_found"


def test_the_same_delivery_sent_twice_is_one_signal(session: Session, car: Car) -> None:
    # Given a deployment waiting for approval
    seen: Seen = []
    declare_deploy(seen)
    action = start(session, car, "deploy")

    # When the same delivery arrives twice (a webhook retried), the second after the first finished the action
    first = testing.send_signal(action, "approved", key="delivery-1")
    second = testing.send_signal(action, "approved", key="delivery-1")

    # Then it was one signal, consumed once
    assert first.id == second.id
    assert len(seen) == 1
    assert inbox(session, action) == [("approved", True)]


def test_a_signal_can_name_its_action_by_actor_and_action_name(session: Session, car: Car) -> None:
    # Given a deployment waiting on this car
    seen: Seen = []
    declare_deploy(seen)
    start(session, car, "deploy")

    # When it is approved by actor and name
    testing.send_signal((car, "deploy"), "approved")

    # Then that action took it
    assert [s["name"] for s in seen] == ["approved"]


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


def test_the_sweeper_matches_a_signal_whose_match_message_was_lost(session: Session, car: Car) -> None:
    # Given a signal kept in the inbox before its wait existed, and the wait's match
    # message lost (the broker dropped it)
    testing.freeze()
    seen: Seen = []
    flow = engine.define(Car, "flow")

    @flow.step
    def first(car: Car, step: engine.StepContext) -> None:
        step.wait(1)

    @flow.step
    def hold(car: Car, step: engine.StepContext) -> None:
        step.wait_for("go")

    @flow.step
    def after(car: Car, step: engine.StepContext) -> None:
        seen.append({"name": step.signal.name if step.signal else None})

    invocation = engine.later(car, "flow")
    session.commit()
    testing.drain()  # its first step waits a second
    session.refresh(invocation)
    action = session.get(Action, invocation.action_id)
    assert action is not None
    engine.signal(action, "go")
    testing.travel(timedelta(seconds=2))
    testing.drain(only=lambda item: item.job != "stepwise.match_signals")
    dramatiq.get_broker().flush_all()
    assert inbox(session, action) == [("go", False)]

    # When the sweeper runs past its grace
    testing.travel(timedelta(minutes=5))
    with engine.new_session() as sweeping:
        report = sweeper.sweep(sweeping)
    testing.drain()

    # Then it sent the match again, and the waiting step took the signal
    assert report.signals == 1
    assert seen == [{"name": "go"}]
    assert inbox(session, action) == [("go", True)]


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
