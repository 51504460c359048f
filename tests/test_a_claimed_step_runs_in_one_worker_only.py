"""A worker that claims a step (engine/claiming.py) runs its body with no transaction of its
own when the body touches no table, and while the claim is live no other worker runs the
body, the sweeper does not send it again and a completion of its action leaves the step to
the body's outcome. A claim whose worker died lapses, and the step is sent again; the keeper
extends the claims of bodies that run long; a retry is claimed afresh.

Under load a worker claims the steps it runs in its process's shared batches; these tests
make it claim always (``claims``), and take a claim as another worker would, in a batch of
their own.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event, select, text, update
from sqlalchemy.orm import Session

import engine
from engine import (
    batch_admission,
    claiming,
    clock,
    commands,
    config,
    db,
    jobs,
    running,
    status,
    sweeper,
    testing,
)
from engine.group_commit import Unit
from engine.models import Action, Invocation, Step
from engine.retry import RetryPolicy
from tests.domain import Car

calls: list[int] = []


@pytest.fixture(autouse=True)
def claiming_always(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(running, "claims", lambda: True)
    calls.clear()
    yield
    clock.reset()


def odometer(car: Car, step: engine.StepContext) -> int:
    calls.append(car.id)
    return car.mileage


def opened(session: Session, car: Car, name: str = "odometer") -> int:
    """The step of a new action on ``car``, admitted and not run."""
    engine.later(car, name)
    session.commit()
    invocation = session.scalars(select(Invocation.id).where(Invocation.settled_at.is_(None))).one()
    with db.transaction() as own:
        batch_admission.admit_all(own, [Unit(None, batch_admission.admit_all, (invocation,))])
    return session.scalars(
        select(Step.id).where(Step.performed_at.is_(None)).order_by(Step.id.desc())
    ).first()


def claimed_elsewhere(step_id: int) -> claiming.Claim | None:
    """The step claimed as another worker's batch would claim it."""
    unit: Unit[Any] = Unit(None, claiming.claim_all, step_id)
    db.retrying_fresh(lambda session: claiming.claim_all(session, [unit]))
    return unit.result  # type: ignore[no-any-return]


def reloaded(session: Session, step_id: int) -> Step:
    session.expire_all()
    step = session.get(Step, step_id)
    assert step is not None
    return step


@pytest.fixture
def transactions(database: Any) -> Iterator[list[str]]:
    """Each commit and rollback on the engine's connections."""
    seen: list[str] = []
    listeners = {
        "commit": lambda conn: seen.append("commit"),
        "rollback": lambda conn: seen.append("rollback"),
    }
    for name, listener in listeners.items():
        event.listen(database, name, listener)
    yield seen
    for name, listener in listeners.items():
        event.remove(database, name, listener)


def test_a_body_that_touches_no_table_runs_in_no_transaction_of_its_own(
    session: Session, car: Car, transactions: list[str]
) -> None:
    engine.define(Car, "odometer", odometer)
    step_id = opened(session, car)
    transactions.clear()

    jobs.perform_step(step_id)

    # The claim's batch and the conclusion's batch: nothing for the body itself
    assert transactions == ["commit", "commit"]
    assert calls == [car.id]
    step = reloaded(session, step_id)
    assert (step.status, step.result) == (status.STEP_SUCCEEDED, car.mileage)


def test_the_first_body_after_an_admission_reads_nothing_of_its_own(session: Session, car: Car) -> None:
    engine.define(Car, "odometer", odometer)
    engine.later(car, "odometer")
    session.commit()
    with db.transaction() as own:
        own.execute(update(Car).where(Car.id == car.id).values(mileage=42))
    statements: list[str] = []
    record = lambda conn, cursor, statement, *args: statements.append(statement)  # noqa: E731

    event.listen(session.get_bind(), "before_cursor_execute", record)
    try:
        testing.perform_enqueued()  # the admission message: admitted, then its first body runs
    finally:
        event.remove(session.get_bind(), "before_cursor_execute", record)

    # The batch that admitted the action claimed its step, and handed the body the car it
    # read to admit it, as that transaction saw it: the body and its conclusion read no car
    assert len([s for s in statements if "FROM cars" in s]) == 1
    step = reloaded(session, session.scalars(select(Step.id)).one())
    assert (step.status, step.result) == (status.STEP_SUCCEEDED, 42)


def test_a_body_that_writes_commits_its_writes_with_its_outcome(session: Session, car: Car) -> None:
    def drive(car: Car, step: engine.StepContext) -> None:
        car.mileage += 10

    engine.define(Car, "drive", drive)
    mileage = car.mileage
    step_id = opened(session, car, "drive")

    jobs.perform_step(step_id)

    session.expire_all()
    assert car.mileage == mileage + 10
    assert reloaded(session, step_id).status == status.STEP_SUCCEEDED
    assert session.scalars(select(Action.status)).one() == status.SUCCEEDED


def test_a_step_another_worker_claimed_is_not_run_here_nor_sent_again(session: Session, car: Car) -> None:
    engine.define(Car, "odometer", odometer)
    step_id = opened(session, car)
    assert claimed_elsewhere(step_id) is not None

    jobs.perform_step(step_id)  # a message delivered twice, or sent again
    with db.transaction() as own:
        report = sweeper.sweep(own, grace=timedelta(0))

    assert calls == []
    assert report.perform_step == 0
    assert reloaded(session, step_id).performed_at is None
    assert claimed_elsewhere(step_id) is None  # nor claimed twice


def test_the_claim_of_a_worker_that_died_lapses_and_its_step_is_sent_again(
    session: Session, car: Car
) -> None:
    engine.define(Car, "odometer", odometer)
    step_id = opened(session, car)
    claimed_elsewhere(step_id)  # and that worker dies

    clock.travel(claiming.LEASE_TIME + timedelta(seconds=1))
    with db.transaction() as own:
        report = sweeper.sweep(own, grace=timedelta(0))
    testing.drain()

    assert report.perform_step == 1
    assert calls == [car.id]
    assert reloaded(session, step_id).status == status.STEP_SUCCEEDED


def test_a_cancel_leaves_a_claimed_step_to_its_bodys_outcome(session: Session, car: Car) -> None:
    engine.define(Car, "odometer", odometer)
    step_id = opened(session, car)
    claim = claimed_elsewhere(step_id)
    assert claim is not None

    action_id = session.scalars(select(Action.id)).one()
    assert commands.cancel(action_id).ok

    assert reloaded(session, step_id).completed_at is None  # its body may be running
    running._run_claimed(claim)  # the body's run ends: its outcome closes the step
    step = reloaded(session, step_id)
    assert step.completed_at is not None
    assert session.get(Action, action_id).status == status.CANCELLED  # type: ignore[union-attr]


def test_the_keeper_extends_the_claims_of_running_bodies_only(session: Session, car: Car) -> None:
    engine.define(Car, "odometer", odometer)
    other = Car(mileage=1)
    session.add(other)
    session.commit()
    running, done = opened(session, car), opened(session, other)
    clock.freeze()
    claims = [claimed_elsewhere(running), claimed_elsewhere(done)]
    assert all(claims)
    keeper = claiming.Keeper()

    keeper.hold([claims[0]])  # type: ignore[list-item]
    assert keeper.extend() == []  # not due yet
    clock.travel(claiming.LEASE_TIME * 0.6)
    assert keeper.extend() == [running]
    keeper.drop([running])  # its outcome is recorded

    assert reloaded(session, running).leased_until == clock.now() + claiming.LEASE_TIME
    assert reloaded(session, done).leased_until < clock.now() + claiming.LEASE_TIME / 2  # type: ignore[operator]
    assert keeper.extend() == []  # no longer running


def test_a_failed_attempt_leaves_its_retry_free_to_claim(session: Session, car: Car) -> None:
    attempts: list[int] = []

    def flaky(car: Car, step: engine.StepContext) -> None:
        attempts.append(step.step.attempt)
        if len(attempts) == 1:
            raise RuntimeError("the gateway is down")

    engine.define(
        Car, "flaky", flaky, retry=RetryPolicy(max_attempts=2, initial_interval=timedelta(0), jitter=0)
    )
    step_id = opened(session, car, "flaky")

    with config.handling():  # as in a worker: the failure is recorded, and retried
        jobs.perform_step(step_id)
        assert reloaded(session, step_id).leased_until is None
        testing.drain()
    assert attempts == [1, 2]
    assert reloaded(session, step_id).status == status.STEP_SUCCEEDED


@pytest.mark.postgresql_only
def test_a_claim_touches_no_index_of_the_steps_table(session: Session) -> None:
    # Given a steps table whose pages were filled by inserts, as a busy one's are
    session.execute(
        text(
            "INSERT INTO stepwise_actions (actor_type, actor_id, name, arguments, status, current_step_index,"
            " checksum_key, concurrency_key, outbound, root, created_at, updated_at)"
            " SELECT 'Car', g::text, 'wash', '[]', 'performing', 0, '', 'Car/' || g, false, true,"
            " now(), now() FROM generate_series(1, 2000) AS g"
        )
    )
    session.execute(
        text(
            "INSERT INTO stepwise_steps (action_id, definition_index, status, attempt, pending_actions_count,"
            " unsuccessful_actions_count, created_at, updated_at)"
            " SELECT id, 0, 'performing', 1, 0, 0, now(), now() FROM stepwise_actions"
        )
    )
    ids = list(session.scalars(select(Step.id).order_by(Step.id)))

    # When a worker claims steps in the middle of it
    claimed = ids[1000:1010]
    updated_before, hot_before = _updates_of_steps(session)
    session.execute(claiming._leased("postgresql"), {"ids": claimed, "until": clock.now()})

    # Then each claim's new row version was written on its own page (HOT): the table's
    # pages keep room for it (fillfactor), and it changes no indexed column
    updated, hot = _updates_of_steps(session)
    assert (updated - updated_before, hot - hot_before) == (len(claimed), len(claimed))


def _updates_of_steps(session: Session) -> tuple[int, int]:
    # This transaction's updates of the steps table so far (the fixture's own writes count
    # too, so a test compares two readings)
    updated, hot = session.execute(
        text("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables WHERE relname = 'stepwise_steps'")
    ).one()
    return updated, hot
