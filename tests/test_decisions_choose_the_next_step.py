"""Decisions: a step body may go to a named step (a branch, or a loop capped by the step's
``max_visits``), finish its action now with a result, or fail it with a reason. Without a
decision the next step runs. Each decision is in the action's history."""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import testing
from engine.errors import ArgumentError
from engine.models import ActionEvent
from tests.domain import Car


def declare_review_flow(visited: list[str]) -> None:
    """An order that checks its amount: large ones go to manual review, small ones skip it."""
    order = engine.define(Car, "order")

    @order.step
    def check(car: Car, step: engine.StepContext, amount: int) -> None:
        visited.append("check")
        step.go_to("review" if amount > 100 else "ship")

    @order.step
    def review(car: Car, step: engine.StepContext, amount: int) -> None:
        visited.append("review")

    @order.step
    def ship(car: Car, step: engine.StepContext, amount: int) -> str:
        visited.append("ship")
        return f"shipped {amount}"


def events(session: Session, action: engine.Action) -> list[tuple[str, dict[str, object]]]:
    rows = session.scalars(
        select(ActionEvent).where(ActionEvent.action_id == action.id).order_by(ActionEvent.id)
    )
    return [(row.event, row.data or {}) for row in rows if row.event == "decided"]


@pytest.mark.parametrize(("amount", "path"), [(500, ["check", "review", "ship"]), (20, ["check", "ship"])])
def test_a_decision_branches_to_a_named_step(
    session: Session, car: Car, amount: int, path: list[str]
) -> None:
    # Given the order flow
    visited: list[str] = []
    declare_review_flow(visited)

    # When an order runs
    action = engine.now(car, "order", amount)

    # Then it took the branch its amount chose, and the history says so
    session.refresh(action)
    assert action.status == "succeeded"
    assert visited == path
    assert engine.result_of(action) == f"shipped {amount}"
    decided = events(session, action)
    assert decided[0][1]["step"] == "check"
    assert decided[0][1]["go_to"] == path[1]


def test_a_loop_runs_until_its_body_moves_on(session: Session, car: Car) -> None:
    # Given a poll that goes back to itself until the third visit
    polls: list[int] = []
    poll = engine.define(Car, "poll")

    @poll.step
    def ask(car: Car, step: engine.StepContext) -> None:
        polls.append(step.step.visit)
        if step.step.visit < 3:
            step.go_to("ask")

    @poll.step
    def done(car: Car, step: engine.StepContext) -> str:
        return "ready"

    # When it runs
    action = engine.now(car, "poll")

    # Then it visited the step three times, each its own step row, then went on
    session.refresh(action)
    assert action.status == "succeeded"
    assert polls == [1, 2, 3]
    assert [(s.definition_index, s.visit) for s in action.steps] == [(0, 1), (0, 2), (0, 3), (1, 1)]
    assert engine.result_of(action) == "ready"


def test_a_loop_that_passes_its_cap_fails_the_action_clearly(session: Session, car: Car) -> None:
    # Given a step that always goes back to itself, capped at 4 visits
    spin = engine.define(Car, "spin")

    @spin.step(max_visits=4)
    def again(car: Car, step: engine.StepContext) -> None:
        step.go_to("again")

    # When it runs
    action = engine.now(car, "spin")

    # Then it ran the step 4 times and failed naming the step and the cap
    session.refresh(action)
    assert action.status == "failed"
    assert len(action.steps) == 4
    assert action.error_class == "engine.errors.LoopLimit"
    assert "'again'" in (action.error_message or "")
    assert "max_visits (4)" in (action.error_message or "")


def test_a_finish_decision_completes_the_action_with_its_result(session: Session, car: Car) -> None:
    # Given a flow whose first step finishes early when there is nothing to do
    ran: list[str] = []
    sync = engine.define(Car, "sync")

    @sync.step
    def look(car: Car, step: engine.StepContext) -> None:
        ran.append("look")
        step.finish({"changes": 0})

    @sync.step
    def copy(car: Car, step: engine.StepContext) -> None:
        ran.append("copy")

    # When it runs
    action = engine.now(car, "sync")

    # Then the later step never ran and the result is the finish's
    session.refresh(action)
    assert action.status == "succeeded"
    assert ran == ["look"]
    assert engine.result_of(action) == {"changes": 0}
    assert events(session, action)[0][1]["finish"] is True


def test_a_fail_decision_fails_the_action_with_its_reason_without_retrying(
    session: Session, car: Car
) -> None:
    # Given a risk check that refuses, with retries to spare
    risk = engine.define(Car, "risk", retry=5)

    @risk.step
    def score(car: Car, step: engine.StepContext) -> None:
        step.fail("score 91 is above the limit of 80")

    @risk.step
    def approve(car: Car, step: engine.StepContext) -> None:
        raise AssertionError("never reached")

    # When it runs
    action = engine.now(car, "risk")

    # Then it failed once, with the reason as its error
    session.refresh(action)
    assert action.status == "failed"
    assert [s.attempt for s in action.steps] == [1]
    assert action.error_class == "engine.errors.Failed"
    assert action.error_message == "score 91 is above the limit of 80"


def test_a_decision_waits_for_the_steps_children(session: Session, car: Car) -> None:
    # Given a step that starts a child and decides to skip the next step
    visited: list[str] = []
    trip = engine.define(Car, "trip")

    @trip.step
    def start(car: Car, step: engine.StepContext) -> None:
        step.do("drive", 5)
        step.go_to("arrive")

    @trip.step
    def detour(car: Car, step: engine.StepContext) -> None:
        visited.append("detour")

    @trip.step
    def arrive(car: Car, step: engine.StepContext) -> None:
        visited.append(f"arrive after {step.children[0].status} drive")

    # When it runs through the workers
    engine.later(car, "trip")
    session.commit()
    testing.drain()

    # Then the decision took effect once the child concluded
    assert visited == ["arrive after succeeded drive"]


def test_going_to_a_step_that_does_not_exist_fails_the_body_naming_the_steps(
    session: Session, car: Car
) -> None:
    # Given a step that goes to a misspelt step
    typo = engine.define(Car, "typo", retry=1)

    @typo.step
    def first(car: Car, step: engine.StepContext) -> None:
        step.go_to("secnod")

    @typo.step
    def second(car: Car, step: engine.StepContext) -> None:
        pass

    # When it runs
    with engine.handling(ArgumentError):
        action = engine.now(car, "typo")

    # Then it failed, and the message lists the steps there are
    session.refresh(action)
    assert action.status == "failed"
    assert "has no step 'secnod'; its steps are first, second" in (action.error_message or "")


def test_a_loop_back_to_an_earlier_step_runs_the_steps_after_it_again(session: Session, car: Car) -> None:
    # Given a wash that rinses, then inspects, and goes back to rinsing until clean
    runs: list[tuple[str, int]] = []
    wash = engine.define(Car, "wash")

    @wash.step
    def rinse(car: Car, step: engine.StepContext) -> None:
        runs.append(("rinse", step.step.visit))

    @wash.step
    def inspect(car: Car, step: engine.StepContext) -> None:
        runs.append(("inspect", step.step.visit))
        if step.step.visit < 3:
            step.go_to("rinse")

    # When it runs
    action = engine.now(car, "wash")

    # Then each pass ran both steps, each visit its own row
    session.refresh(action)
    assert action.status == "succeeded"
    assert runs == [("rinse", 1), ("inspect", 1), ("rinse", 2), ("inspect", 2), ("rinse", 3), ("inspect", 3)]
