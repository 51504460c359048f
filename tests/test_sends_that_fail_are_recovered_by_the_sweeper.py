"""Given a message the broker refused after its transaction committed, a job-backed
action's job or a ``complete_later`` completion, when the sweeper runs after the grace
period, then it sends that message again and the action completes; a job whose send was
confirmed is never sent twice, however long it runs; and work whose send never succeeds
fails visibly after the last re-send.

Not a spec case (issue 9; review 2.5: "job-backed actions and complete_later are outside
the outbox"). Before, the step counted as performed, the action stayed performing, and no
sweep ever matched it. A job's send is confirmed on its step (``job_sent_at``); a
completion is recorded as an invocation (kind "complete") in the caller's transaction.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import dramatiq
import pytest
from sqlalchemy import select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

import engine
from engine import broker, status, testing
from engine.models import ActionEvent, Invocation
from engine.sweeper import GRACE, MAX_RESENDS, SweepReport, backoff
from tests.domain import Car
from tests.sweeper_scenarios import SECOND, frozen, recovered, reloaded, sweep

__all__ = ["frozen"]  # the autouse fixture: pytest finds it in this module

broker.setup()  # the job below is declared on the process's broker (the stub one in tests)


@dramatiq.actor(actor_name="haul_job", queue_name="default")
def haul_job(action_id: int) -> None:
    """Haul the car to the action's first argument, then complete the action."""
    with engine.new_session() as session:
        action = session.get(engine.Action, action_id)
        assert action is not None
        action.actor.location = action.arguments[0]
        session.commit()
        engine.complete_action(action)


@pytest.fixture(autouse=True)
def haul(database: Engine) -> engine.Definition:
    return engine.define(Car, "haul", job=haul_job)


def refuse(monkeypatch: pytest.MonkeyPatch, job: str, times: int = 1) -> None:
    """The broker refuses the next ``times`` messages of ``job``, as Redis does during a blip."""
    stub = dramatiq.get_broker()
    real = stub.enqueue
    refused: list[object] = []

    def enqueue(message: Any, *, delay: int | None = None) -> Any:
        if message.actor_name == job and len(refused) < times:
            refused.append(message)
            raise ConnectionError("broker down")
        return real(message, delay=delay)

    monkeypatch.setattr(stub, "enqueue", enqueue)


def nothing_left_to_sweep() -> bool:
    testing.travel(timedelta(days=1))
    return sweep() == SweepReport()


# --- jobs ---------------------------------------------------------------------------------


def test_a_job_whose_send_failed_is_sent_again_by_the_sweeper(
    session: Session, car: Car, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a job-backed action whose job's message the broker refused once
    refuse(monkeypatch, "haul_job")
    action = engine.now(car, "haul", "garage")
    assert action.status == status.PERFORMING
    assert testing.enqueued("haul_job") == []

    # When the sweeper runs within the grace period, then after it
    testing.travel(GRACE - SECOND)
    assert sweep() == SweepReport()
    testing.travel(2 * SECOND)
    assert sweep() == SweepReport(job=1)

    # Then it sent the job again, which completed the action
    assert [queued.args for queued in testing.enqueued("haul_job")] == [(action.id,)]
    testing.drain()
    assert reloaded(session, action).status == status.SUCCEEDED
    session.refresh(car)
    assert car.location == "garage"
    [event] = recovered(session)
    assert (event.action_id, event.cause, event.data["job"]) == (action.id, "sweeper", "haul_job")
    assert nothing_left_to_sweep()


@pytest.mark.parametrize("where", ["now", "worker"])
def test_a_job_whose_send_was_confirmed_is_not_sent_again_while_it_runs(
    session: Session, car: Car, where: str
) -> None:
    # Given a job-backed action, performed here or by a worker, whose job's message the
    # broker took
    if where == "now":
        action = engine.now(car, "haul", "garage")
    else:
        engine.later(car, "haul", "garage")
        session.commit()
        testing.drain(only=lambda queued: queued.job != "haul_job")
        action = session.scalars(select(engine.Action)).one()
    assert len(testing.enqueued("haul_job")) == 1

    # When the job takes an hour, and the sweeper runs meanwhile
    testing.travel(timedelta(hours=1))
    report = sweep()

    # Then it does not send the job a second time
    assert report == SweepReport()
    assert len(testing.enqueued("haul_job")) == 1
    testing.drain()
    assert reloaded(session, action).status == status.SUCCEEDED


def test_a_job_the_broker_always_refuses_fails_its_action_after_the_last_resend(
    session: Session, car: Car, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a job-backed action whose job's every message the broker refuses
    refuse(monkeypatch, "haul_job", times=MAX_RESENDS + 1)
    action = engine.now(car, "haul", "garage")

    # When the sweeper sends it again each time it is due
    reports = []
    for resends in range(MAX_RESENDS + 1):
        testing.travel(backoff(GRACE, resends) + SECOND)
        reports.append(sweep())

    # Then it gave up after MAX_RESENDS, and the action failed, naming its job
    assert reports == [SweepReport(job=1)] * MAX_RESENDS + [SweepReport(gave_up=1)]
    action = reloaded(session, action)
    assert (action.status, action.error_class) == (status.FAILED, "engine.errors.Stalled")
    assert f"job 'haul_job' of action {action.id} (haul on Car/{car.id})" in (action.error_message or "")
    assert nothing_left_to_sweep()


# --- complete_later -----------------------------------------------------------------------


def test_a_completion_whose_send_failed_is_carried_out_by_the_sweeper(
    session: Session, car: Car, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an outbound action, and its completion requested while the broker was down
    engine.define(Car, "change_location", outbound=True)
    action = engine.now(car, "change_location", "Paris")
    refuse(monkeypatch, "stepwise.complete")
    engine.complete_later(car, "change_location")
    session.commit()
    assert testing.enqueued("stepwise.complete") == []

    # When the sweeper runs within the grace period, then after it
    testing.travel(GRACE - SECOND)
    assert sweep() == SweepReport()
    testing.travel(2 * SECOND)
    assert sweep() == SweepReport(complete=1)
    testing.drain()

    # Then the action was completed, once, and the request is settled
    assert reloaded(session, action).status == status.SUCCEEDED
    request = session.scalars(select(Invocation).where(Invocation.kind == "complete")).one()
    assert (request.action_id, request.outcome, request.settled_at is not None) == (
        action.id,
        "completed",
        True,
    )
    [event] = recovered(session)
    assert (event.action_id, event.invocation_id, event.data["job"]) == (
        action.id,
        request.id,
        "stepwise.complete",
    )
    assert nothing_left_to_sweep()


def test_a_completion_delivered_twice_completes_its_action_once(session: Session, car: Car) -> None:
    # Given an outbound action, the next one queued in its lane, and one completion requested
    engine.define(Car, "change_location", outbound=True, concurrency_key="Car/moves")
    first = engine.now(car, "change_location", "Paris")
    second = engine.now(car, "change_location", "Rome")
    engine.complete_later(car, "change_location")
    session.commit()
    [message] = testing.enqueued("stepwise.complete")

    # When its message is delivered twice
    testing.drain()
    dramatiq.get_broker().enqueue(message.message)
    testing.drain()

    # Then the first action was completed, and the second still performs
    assert reloaded(session, first).status == status.SUCCEEDED
    assert reloaded(session, second).status == status.PERFORMING


def test_a_completion_the_broker_always_refuses_fails_visibly_after_the_last_resend(
    session: Session, car: Car, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an outbound action whose completion's every message the broker refuses
    engine.define(Car, "change_location", outbound=True)
    action = engine.now(car, "change_location", "Paris")
    refuse(monkeypatch, "stepwise.complete", times=MAX_RESENDS + 2)
    engine.complete_later(car, "change_location")
    session.commit()

    # When the sweeper sends it again each time it is due
    reports = []
    for resends in range(MAX_RESENDS + 1):
        testing.travel(backoff(GRACE, resends) + SECOND)
        reports.append(sweep())

    # Then it gave up: the request failed, naming itself, and the action waits as before
    assert reports == [SweepReport(complete=1)] * MAX_RESENDS + [SweepReport(gave_up=1)]
    request = session.scalars(select(Invocation).where(Invocation.kind == "complete")).one()
    assert (request.outcome, request.error_class) == ("failed", "engine.errors.Stalled")
    assert f"completion {request.id} of action {action.id}" in (request.error_message or "")
    assert reloaded(session, action).status == status.PERFORMING
    [failed] = session.scalars(select(ActionEvent).where(ActionEvent.event == "completion_failed"))
    assert (failed.action_id, failed.invocation_id, failed.cause) == (action.id, request.id, "sweeper")
    assert nothing_left_to_sweep()
