"""Signals: a named, durable message to one action, kept in its inbox until a step that
waits for it consumes it, exactly once. Waits combine signals as any-of or all-of, with a
deadline; the next step reads what satisfied the wait. Nothing holds a worker while a step
waits; a signal to a finished action is refused and changes nothing."""

from __future__ import annotations

from datetime import timedelta

import dramatiq
import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

import engine
from engine import sweeper, testing
from engine.errors import SignalRefused
from engine.models import Action, ActionEvent
from tests.domain import Car
from tests.signal_scenarios import Seen, declare_deploy, inbox, start


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
