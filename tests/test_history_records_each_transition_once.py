"""Every engine function that changes state leaves exactly one history entry per
transition: a busy scenario goes through admission, queueing, superseding, sharing,
skipping, deadlock, failed attempts, timeouts, outbound completion, an operator's cancel
and retry, and then each row's history is checked against the row itself."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

import engine
from engine import RetryPolicy, StepContext, commands, testing
from engine.models import Action, ActionEvent, Invocation, Step
from tests.domain import Car


def events_by_action(session: Session) -> dict[int | None, Counter[str]]:
    found: dict[int | None, Counter[str]] = {}
    for event in session.scalars(select(ActionEvent)):
        found.setdefault(event.action_id, Counter())[event.event] += 1
    return found


def events_by_step(session: Session) -> dict[int | None, Counter[str]]:
    found: dict[int | None, Counter[str]] = {}
    for event in session.scalars(select(ActionEvent).where(ActionEvent.step_id.is_not(None))):
        found.setdefault(event.step_id, Counter())[event.event] += 1
        if event.event == "step_reopened" and event.data["retried"] == 0:
            found[event.step_id]["body_reopened"] += 1  # the body runs again: a new attempt
    return found


def busy_scenario(session: Session, car: Car) -> None:
    testing.freeze(testing.travel(timedelta()))
    tries = {"n": 0}

    def flaky(car: Car) -> None:
        tries["n"] += 1
        if tries["n"] < 3:
            raise RuntimeError(f"try {tries['n']}")

    engine.define(Car, "flaky", flaky, retry=RetryPolicy(max_attempts=3, jitter=0))
    engine.define(Car, "paint", Car.change_location, outbound=True, concurrency_key="booth")
    engine.define(Car, "visit", Car.change_location, checksum=lambda car, loc: loc, outbound=True)
    engine.define(Car, "slow", Car.change_location, outbound=True, timeout=timedelta(seconds=5))
    engine.define(Car, "recycle", outbound=True, concurrency_key="booth").step(
        lambda car, step: step.do("paint", "grey")
    )
    trip = engine.define(Car, "trip")

    @trip.step
    def go(car: Car, step: StepContext) -> None:
        step.do("flaky")
        step.do("visit", "Oslo")
        step.do("visit", "Oslo")  # shared with itself
        step.do("slow", "x")
        step.wait(timedelta(seconds=1))

    @trip.step
    def back(car: Car, step: StepContext) -> None:
        step.do("drive", 3)

    with testing.handle_exceptions():
        engine.now(car, "paint", "red")  # holds the booth lane
        engine.now(car, "paint", "blue")  # queued
        engine.now(car, "paint", "green")  # supersedes blue
        recycle = engine.now(car, "recycle")  # queued in the booth; its child will deadlock
        trip_action = engine.now(car, "trip")
        for _ in range(4):
            testing.drain()
            testing.travel(timedelta(seconds=2))
        assert engine.complete(car, "visit")
        testing.drain()
        commands.retry(
            session.scalars(select(Action.id).where(Action.name == "slow")).one(),
            timeout=timedelta(minutes=1),
        )
        testing.drain()
        assert engine.complete(car, "slow")
        testing.drain()
        testing.perform_actions(complete_outbound_with="succeeded")  # recycle's paint deadlocks
        commands.cancel(engine.now(car, "paint", "white").id, by="ops")
        engine.now(car, "visit", "Oslo")  # skipped by the achievement
    session.expire_all()
    assert session.get(Action, trip_action.id).status == "succeeded"  # type: ignore[union-attr]
    assert session.get(Action, recycle.id).status == "failed"  # type: ignore[union-attr]


def test_each_transition_of_each_action_is_recorded_exactly_once(session: Session, car: Car) -> None:
    busy_scenario(session, car)
    history = events_by_action(session)

    for action in session.scalars(select(Action)):
        seen = history.get(action.id, Counter())
        retried = seen["retried"]
        assert seen["admitted"] + seen["queued"] == 1, (action, seen)
        assert seen["started"] == (0 if action.started_at is None else 1 + retried), (action, seen)
        if action.status == "superseded":
            assert (seen["superseded"], seen["completed"]) == (1, 0), (action, seen)
        elif action.status in ("pending", "performing"):
            assert seen["completed"] == retried, (action, seen)
        else:
            assert seen["completed"] == 1 + retried, (action, seen)

    steps = events_by_step(session)
    for step in session.scalars(select(Step)):
        seen = steps.get(step.id, Counter())
        assert seen["step_started"] == 1, (step, seen)
        assert seen["step_concluded"] == (0 if step.completed_at is None else 1 + seen["step_reopened"]), (
            step,
            seen,
        )
        assert seen["attempt_failed"] + seen["body_reopened"] == step.attempt - 1, (step, seen)


def test_each_invocation_that_never_became_an_action_is_recorded_once(session: Session, car: Car) -> None:
    busy_scenario(session, car)
    outcomes = Counter(
        session.scalars(
            select(Invocation.outcome).where(
                Invocation.kind == "action", Invocation.outcome.not_in(["admitted", "attached"])
            )
        )
    )
    recorded = Counter(
        e.event.removeprefix("invocation_")
        for e in session.scalars(select(ActionEvent).where(ActionEvent.event.startswith("invocation_")))
    )
    assert outcomes == recorded
    assert (outcomes["skipped"], outcomes["deadlocked"]) == (1, 1)
    attached = session.scalar(select(func.count()).where(Invocation.outcome == "attached"))
    assert attached and sum(e["attached"] for e in events_by_action(session).values()) == attached
