"""Given work the sweeper sent again that still made no progress, when it sweeps again,
then it leaves that work alone twice as long after each re-send, so a backlog is not sent
on every sweep and work backed off leaves room for other work; and after ``MAX_RESENDS``
re-sends it gives up: the work fails visibly, with a ``Stalled`` error naming its id and
what to do, and the tree above fails with it. An operator's retry starts the count afresh.

Not a spec case (issue 9; review 2.2: "the sweeper has no memory"). How work is lost is in
sweeper_scenarios.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event, select, text
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

import engine
from engine import commands, status, testing
from engine.models import ActionEvent, Invocation, Step
from engine.sweeper import GRACE, MAX_RESENDS, SweepReport, backoff
from tests.domain import Car
from tests.sweeper_scenarios import (
    SECOND,
    define_outbound_move,
    define_park,
    frozen,
    lose_messages,
    open_without_running,
    recovered,
    reloaded,
    sweep,
)

__all__ = ["frozen"]  # the autouse fixture: pytest finds it in this module


def sweep_until_given_up(deliver: Callable[[], Any] = lose_messages) -> list[SweepReport]:
    """Sweep each time the work is due again, each message it sends being lost (or failing
    when delivered), until the sweeper gives up on it."""
    reports = []
    for resends in range(MAX_RESENDS):
        testing.travel(backoff(GRACE, resends) + SECOND)
        reports.append(sweep())
        deliver()
    testing.travel(backoff(GRACE, MAX_RESENDS) + SECOND)
    reports.append(sweep())
    return reports


def nothing_left_to_sweep() -> bool:
    testing.travel(timedelta(days=1))
    return sweep() == SweepReport()


def test_work_sent_again_is_left_alone_twice_as_long_after_each_resend(session: Session, car: Car) -> None:
    # Given an invocation whose admission message was lost
    engine.later(car, "drive", 5)
    session.commit()
    lose_messages()

    # When the sweeper sends it again after the grace period, and that message is lost too
    testing.travel(GRACE + SECOND)
    assert sweep() == SweepReport(admit=1)
    lose_messages()

    # Then it is not sent again before twice the grace period has passed
    testing.travel(GRACE + SECOND)
    assert sweep() == SweepReport()
    testing.travel(GRACE)
    assert sweep() == SweepReport(admit=1)
    lose_messages()

    # and then not before four times the grace period
    testing.travel(3 * GRACE)
    assert sweep() == SweepReport()
    testing.travel(GRACE + SECOND)
    assert sweep() == SweepReport(admit=1)

    # and each recovery says which re-send it was
    assert [event.data["resend"] for event in recovered(session)] == [1, 2, 3]
    testing.drain()
    session.refresh(car)
    assert car.mileage == 5


def test_work_backed_off_leaves_room_for_other_work_in_a_sweep(session: Session, car: Car) -> None:
    # Given two lost admissions, sent again once and lost again
    engine.later(car, "drive", 1)
    engine.later(car, "drive", 2)
    session.commit()
    lose_messages()
    testing.travel(GRACE + SECOND)
    assert sweep(limit=2) == SweepReport(admit=2)
    lose_messages()

    # and a third one lost after that sweep
    engine.later(car, "drive", 4)
    session.commit()
    lose_messages()

    # When the sweeper runs with a limit of two, once the third is due and the first two not yet
    testing.travel(GRACE + SECOND)
    report = sweep(limit=2)

    # Then it sends the third: the two older ones do not take its place
    assert report == SweepReport(admit=1)
    testing.drain()
    session.refresh(car)
    assert car.mileage == 4


def test_an_admission_that_fails_on_every_delivery_fails_its_parent_after_the_last_resend(
    session: Session, car: Car
) -> None:
    # Given visit starts honk, whose concurrency key raises an error nothing handles, so that
    # honk's admission fails on every delivery
    def no_key(car: Car) -> str:
        raise RuntimeError("no key today")

    engine.define(Car, "honk", concurrency_key=no_key)
    visit = engine.define(Car, "visit")

    @visit.step
    def go(car: Car, step: engine.StepContext) -> None:
        step.do("honk")

    parent = engine.now(car, "visit")

    def delivery_fails() -> None:
        with pytest.raises(RuntimeError, match="no key today"):
            testing.drain()

    delivery_fails()
    invocation = session.scalars(select(Invocation).where(Invocation.name == "honk")).one()

    # When the sweeper sends it again each time it is due
    reports = sweep_until_given_up(delivery_fails)

    # Then it sent it again MAX_RESENDS times, and then gave up
    assert reports == [SweepReport(admit=1)] * MAX_RESENDS + [SweepReport(gave_up=1)]
    assert len(recovered(session)) == MAX_RESENDS

    # and the invocation failed, naming itself, its last error and what to do
    session.refresh(invocation)
    assert (invocation.outcome, invocation.error_class) == ("failed", "engine.errors.Stalled")
    message = invocation.error_message or ""
    assert f"invocation {invocation.id} (honk on Car/{car.id}) was sent again {MAX_RESENDS} times" in message
    assert "last error: builtins.RuntimeError: no key today" in message

    # and the parent's step concluded unsuccessfully, failing the parent, by the sweeper
    parent = reloaded(session, parent)
    assert parent.status == status.FAILED
    assert [step.status for step in parent.steps] == [status.STEP_FAILED]
    [failed] = session.scalars(select(ActionEvent).where(ActionEvent.event == "invocation_failed"))
    assert (failed.action_id, failed.invocation_id, failed.cause) == (parent.id, invocation.id, "sweeper")
    assert nothing_left_to_sweep()


def test_a_step_whose_body_never_runs_fails_its_action_after_the_last_resend(
    session: Session, car: Car
) -> None:
    # Given a step opened by a worker that was killed, whose every re-sent message is lost
    open_without_running(session, car, "drive", 4)
    step = session.scalars(select(Step)).one()

    # When the sweeper sends it again each time it is due
    reports = sweep_until_given_up()

    # Then it gave up after MAX_RESENDS, and the action failed, saying what to do
    assert reports == [SweepReport(perform_step=1)] * MAX_RESENDS + [SweepReport(gave_up=1)]
    action = reloaded(session, step.action)
    assert (action.status, action.error_class) == (status.FAILED, "engine.errors.Stalled")
    message = action.error_message or ""
    assert f"step {step.id} of action {action.id} (drive on Car/{car.id}) was sent again" in message
    assert f"stepwise retry {action.id}" in message
    [completed] = session.scalars(select(ActionEvent).where(ActionEvent.event == "completed"))
    assert (completed.cause, completed.data["error_class"]) == ("sweeper", "engine.errors.Stalled")
    session.refresh(step)
    assert step.status == status.STEP_CANCELLED
    assert nothing_left_to_sweep()

    # When an operator retries the action, and its step's message is lost again
    assert commands.retry(action.id)
    lose_messages()

    # Then the sweeper sends the step again instead of giving up at once
    testing.travel(GRACE + SECOND)
    assert sweep() == SweepReport(perform_step=1)
    testing.drain()
    assert reloaded(session, action).status == status.SUCCEEDED
    session.refresh(car)
    assert car.mileage == 4


def test_a_wait_that_never_concludes_fails_its_action_after_the_last_resend(
    session: Session, car: Car
) -> None:
    # Given a step waiting 60 seconds, whose every wait_over message is lost
    define_park(60)
    action = engine.now(car, "park")
    lose_messages()
    wait = session.scalars(select(Invocation).where(Invocation.kind == "wait")).one()
    testing.travel(timedelta(seconds=60))

    # When the sweeper sends it again each time it is due
    reports = sweep_until_given_up()

    # Then it gave up after MAX_RESENDS, and the action failed, naming the wait
    assert reports == [SweepReport(wait_over=1)] * MAX_RESENDS + [SweepReport(gave_up=1)]
    action = reloaded(session, action)
    assert (action.status, action.error_class) == (status.FAILED, "engine.errors.Stalled")
    assert f"wait {wait.id} of action {action.id} (park on Car/{car.id})" in (action.error_message or "")

    # and the wait concluded unsuccessfully, so its step is not left waiting
    session.refresh(wait)
    assert (wait.outcome, wait.succeeded, wait.concluded_at is not None) == ("failed", False, True)
    assert [step.status for step in action.steps] == [status.STEP_FAILED]
    session.refresh(car)
    assert car.location is None
    assert nothing_left_to_sweep()


def test_a_timeout_that_never_takes_effect_fails_its_action_after_the_last_resend(
    session: Session, car: Car
) -> None:
    # Given an outbound action with a 5 second timeout, whose every timeout message is lost
    define_outbound_move()
    action = engine.now(car, "change_location", "Paris")
    lose_messages()
    testing.travel(timedelta(seconds=5))

    # When the sweeper sends it again each time it is due
    reports = sweep_until_given_up()

    # Then it gave up after MAX_RESENDS, and the action failed, naming its timeout
    assert reports == [SweepReport(timeout=1)] * MAX_RESENDS + [SweepReport(gave_up=1)]
    action = reloaded(session, action)
    assert (action.status, action.error_class) == (status.FAILED, "engine.errors.Stalled")
    assert f"the timeout of action {action.id} (change_location on Car/{car.id})" in (
        action.error_message or ""
    )
    assert nothing_left_to_sweep()


@pytest.fixture
def statements(database: Engine) -> Iterator[list[tuple[str, Any]]]:
    """The SQL statements run meanwhile, with their parameters."""
    seen: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        seen.append((statement, parameters))

    event.listen(database, "before_cursor_execute", record)
    yield seen
    event.remove(database, "before_cursor_execute", record)


def test_the_sweeper_finds_due_waits_through_their_index(
    session: Session, car: Car, database: Engine, statements: list[tuple[str, Any]]
) -> None:
    """A long wait not yet due costs the sweeper nothing: it reads the partial index of
    waits not concluded, by due time, instead of every unsettled invocation."""
    # Given a lost wait, due
    define_park(60)
    engine.now(car, "park")
    lose_messages()
    testing.travel(timedelta(seconds=60) + GRACE + SECOND)

    # When the sweeper runs
    assert sweep() == SweepReport(wait_over=1)

    # Then its query for waits reads the index of due waits
    [(query, parameters)] = [(s, p) for s, p in statements if "kind = 'wait'" in s]
    with database.connect() as connection:
        if database.dialect.name == "postgresql":
            connection.execute(text("SET enable_seqscan = off"))
            plan = connection.exec_driver_sql(f"EXPLAIN {query}", parameters).scalars().all()
        else:
            plan = [row[-1] for row in connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {query}", parameters)]
    assert any("ix_stepwise_invocations_due_waits" in line for line in plan), plan
