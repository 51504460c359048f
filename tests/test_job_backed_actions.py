"""Given an action backed by a job, when it is invoked, its step hands the action to the
job and the action stays performing until the job completes it.

Spec §8 cases 34-36 (test/models/stepped/action_as_job_test.rb). Stepped's ``TowJob`` is
an ActiveJob receiving the action through GlobalID; ours is a Dramatiq job receiving the
action's id, which loads the action in its own session. Rails' ``retry_job`` is
``dramatiq.Retry``; ``engine.testing`` re-enqueues the message as the Retries middleware would.
"""

from __future__ import annotations

import time

import dramatiq
import pytest
from sqlalchemy import select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

import engine
from engine import broker, testing
from tests.conftest import Counts
from tests.domain import Car

broker.setup()  # the job below is declared on the process's broker (the stub one in tests)


@dramatiq.actor(actor_name="tow_job", queue_name="default")
def tow_job(action_id: int) -> None:
    """Tow the car to the action's first argument, then complete the action."""
    with engine.new_session() as session:
        action = session.get(engine.Action, action_id)
        assert action is not None
        car = action.actor
        location = action.arguments[0]
        if location == "retry":
            raise dramatiq.Retry(delay=0)
        car.location = location
        session.commit()
        engine.complete_action(action)


@dramatiq.actor(actor_name="tow_and_complete_job", queue_name="default")
def tow_and_complete_job(action_id: int) -> None:
    """Tow the car through the job's own session, flushed but not committed, then
    complete the action as its second argument says: by id in the job's session, by the
    action loaded in it, or by id alone (in a transaction of its own)."""
    with engine.new_session() as session:
        action = session.get(engine.Action, action_id)
        assert action is not None
        location, completing = action.arguments
        action.actor.location = location
        session.flush()  # the job has written: on SQLite it now holds the write lock
        if completing == "by id in the job's session":
            engine.complete_action(action_id, session=session)
        elif completing == "by the action loaded in the job's session":
            engine.complete_action(action)
        else:
            engine.complete_action(action_id)


@pytest.fixture(autouse=True)
def tow(database: Engine) -> engine.Definition:
    return engine.define(Car, "tow", job=tow_job)


def see_committed_work(session: Session) -> None:
    """End the test session's transaction (SQLite reads from its snapshot until then) and
    expire what it holds, so the jobs' commits become visible."""
    session.commit()
    session.expire_all()


def tow_jobs() -> list[testing.Enqueued]:
    return testing.enqueued("tow_job")


def perform_tow_jobs() -> int:
    """Rails' ``perform_enqueued_jobs(only: TowJob)``."""
    return testing.perform_enqueued(only=lambda queued: queued.job == "tow_job")


def test_an_action_defined_as_a_job_succeeds_when_the_job_completes_it(
    session: Session, car: Car, counts: Counts
) -> None:
    """Spec §8 case 34: perform action defined as Job."""
    # When the job-backed action is invoked
    action = engine.now(car, "tow", "service")

    # Then its one step enqueued the job and succeeded, while the action keeps its lane
    assert counts.delta() == {"actions": 1, "steps": 1, "performances": 1, "achievements": 0}
    assert [queued.args for queued in tow_jobs()] == [(action.id,)]
    assert action.status == "performing"
    assert action.steps[0].status == "succeeded"

    # When the job runs
    assert perform_tow_jobs() == 1

    # Then it completed the action, which leaves its lane
    assert counts.delta() == {"actions": 0, "steps": 0, "performances": -1, "achievements": 0}
    see_committed_work(session)
    assert action.status == "succeeded"
    assert action.outbound is True
    assert action.job == "tow_job"
    assert car.location == "service"
    assert action.steps[0].pending_actions_count == 0


def test_a_job_that_retries_itself_completes_the_action_on_a_later_attempt(
    session: Session, car: Car, counts: Counts
) -> None:
    """Spec §8 case 35: job that retries itself. Rails' ``retry_job`` is ``raise
    dramatiq.Retry(delay=0)``; the retried message is queued again."""
    # Given a job-backed action whose job will ask to be retried
    action = engine.now(car, "tow", "retry")
    assert len(tow_jobs()) == 1

    # When the job runs, it enqueues itself again
    assert perform_tow_jobs() == 1
    assert [queued.args for queued in tow_jobs()] == [(action.id,)]

    # And the arguments change before the retry
    action.arguments = ["Paris"]
    session.commit()

    # When the retry runs, no further job is enqueued and the action succeeded
    assert perform_tow_jobs() == 1
    assert tow_jobs() == []
    see_committed_work(session)
    assert action.status == "succeeded"
    assert car.location == "Paris"


def test_a_step_prepended_to_a_job_action_runs_before_the_job(
    session: Session, car: Car, counts: Counts
) -> None:
    """Spec §8 case 36: prepending step to existing job action
    (``Car.prepend_stepped_action_step :tow { honk }``)."""

    # Given a step prepended to the job-backed action
    @engine.definition(Car, "tow").prepend_step
    def honk_first(car: Car, step: engine.StepContext, *arguments: object) -> None:
        car.honk()

    # When the action is invoked
    action = engine.now(car, "tow", "service")

    # Then both steps ran (the prepended one first) and the job is enqueued
    assert counts.delta() == {"actions": 1, "steps": 2, "performances": 1, "achievements": 0}
    assert len(tow_jobs()) == 1
    assert action.status == "performing"
    assert action.steps[0].status == "succeeded"
    assert car.honks == 1

    # When the job runs
    perform_tow_jobs()

    # Then the action succeeded and nothing ran twice
    assert counts.delta() == {"actions": 0, "steps": 0, "performances": -1, "achievements": 0}
    see_committed_work(session)
    assert action.status == "succeeded"
    assert action.steps[0].pending_actions_count == 0
    assert action.steps[1].pending_actions_count == 0
    assert car.honks == 1
    assert car.location == "service"


def perform_tow_and_complete_jobs() -> int:
    return testing.perform_enqueued(only=lambda queued: queued.job == "tow_and_complete_job")


@pytest.mark.parametrize(
    "completing", ["by id in the job's session", "by the action loaded in the job's session"]
)
def test_a_job_that_wrote_in_its_session_completes_the_action_in_the_same_transaction(
    session: Session, car: Car, completing: str
) -> None:
    """Issue 9: the job's changes and the completion commit together (neither is lost
    if the other fails), and on SQLite nothing waits for the write lock the job holds."""
    # Given an action whose job writes through its own session, then completes the action
    engine.define(Car, "tow", job=tow_and_complete_job)
    action = engine.now(car, "tow", "garage", completing)
    assert action.status == "performing"

    # When the job runs
    started = time.monotonic()
    assert perform_tow_and_complete_jobs() == 1

    # Then, at once, the action succeeded and the car is where the job towed it
    assert time.monotonic() - started < 5
    see_committed_work(session)
    assert action.status == "succeeded"
    assert car.location == "garage"


@pytest.mark.sqlite_only
@pytest.mark.timeout(20)
def test_a_job_completing_the_action_outside_the_transaction_it_wrote_in_is_refused_at_once(
    session: Session, car: Car
) -> None:
    """Issue 9: on SQLite the completion's own transaction would wait for the write lock
    that the job's session holds in the same thread (30 s, then "database is locked"). The
    engine says so at once, and what to do instead."""
    # Given an action whose job writes through its own session, then completes the action
    # by id alone, outside the job's transaction
    engine.define(Car, "tow", job=tow_and_complete_job)
    action = engine.now(car, "tow", "garage", "by id alone")

    # When the job runs, it is told at once to complete in its own session
    started = time.monotonic()
    with pytest.raises(engine.SessionConflict, match=r"session=session"):
        perform_tow_and_complete_jobs()
    assert time.monotonic() - started < 5

    # And nothing of the job's or the completion's work was committed: the action waits
    # for the job's next delivery (Dramatiq retries a failed job)
    see_committed_work(session)
    assert action.status == "performing"
    assert car.location is None
    assert session.scalars(select(engine.Action.status)).all() == ["performing"]
