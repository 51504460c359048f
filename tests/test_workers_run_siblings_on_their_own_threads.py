"""Given a worker process with its pool of local runs started (engine/local_runs.py: what
a process the ``dramatiq`` command started does once its worker booted), when a body starts
children, then the batch that admits them claims the siblings of the first child for the
pool, and they run there at once and in parallel, with no message to the broker; what the
pool cannot take goes to the broker, and what fails there, or runs past Dramatiq's time
limit, is sent to it too."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import dramatiq
import pytest
from dramatiq.middleware import TimeLimit
from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import batch_admission, config, db, local_runs, running, testing, worker_gc
from engine import broker as engine_broker
from engine.group_commit import Unit
from engine.models import Action, Invocation, Step
from engine.worker_process import WorkerProcess
from tests.domain import Car

#: The three children of a meeting: each body returns only once all three are running.
meeting = threading.Barrier(3, timeout=10)


@pytest.fixture(autouse=True)
def in_process_admission() -> Iterator[None]:
    config.admit_children_here = True
    meeting.reset()
    yield
    config.admit_children_here = False
    local_runs.pool.stop()


@pytest.fixture(autouse=True)
def gathering() -> None:
    """A ``gather`` of three ``meet`` children, each in a lane of its own."""

    def meet(car: Car, seat: int) -> None:
        meeting.wait()

    engine.define(Car, "meet", meet, concurrency_key=lambda car, seat: f"Car/{car.id}/meet/{seat}")
    def sit(car: Car, seat: int) -> None:
        pass

    engine.define(Car, "sit", sit, concurrency_key=lambda car, seat: f"Car/{car.id}/sit/{seat}")

    def linger(car: Car, seat: int) -> None:
        """Ten seconds on the pool's threads (interrupted sooner by a time limit), none elsewhere."""
        if threading.current_thread().name.startswith("stepwise-local"):
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                time.sleep(0.01)

    engine.define(Car, "linger", linger, concurrency_key=lambda car, seat: f"Car/{car.id}/linger/{seat}")
    gather = engine.define(Car, "gather")

    @gather.step
    def invite(car: Car, step: engine.StepContext) -> None:
        for seat in (1, 2, 3):
            step.do({"alone": "sit", "lingering": "linger"}.get(car.location or "", "meet"), seat)


def ended(session: Session, count: int, seconds: float = 15) -> list[tuple[str, str]]:
    """The actions' names and statuses once ``count`` of them ended (the pool's runs
    end on its threads)."""
    deadline = time.monotonic() + seconds
    while True:
        session.expire_all()
        statement = select(Action.name, Action.status).order_by(Action.id)
        found: list[tuple[str, str]] = [(name, status) for name, status in session.execute(statement)]
        done = sum(status in ("succeeded", "failed") for _, status in found)
        if done >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def test_siblings_run_on_the_worker_s_own_threads_in_parallel_with_no_message(
    session: Session, car: Car
) -> None:
    # Given a worker whose pool has threads free
    local_runs.pool.start(4)
    engine.later(car, "gather")
    session.commit()

    # When it admits the gathering (the first child runs on this thread, and its body
    # returns only once its two siblings run too)
    testing.perform_enqueued()

    # Then every child met the others (they ran at once), and none was sent to the broker
    assert ended(session, 4) == [("gather", "succeeded")] + [("meet", "succeeded")] * 3
    assert testing.enqueued() == []


def test_siblings_the_pool_cannot_take_go_to_the_broker(session: Session, car: Car) -> None:
    # Given a worker whose pool has one thread free
    local_runs.pool.start(1)
    car.location = "alone"
    engine.later(car, "gather")
    session.commit()

    # When it admits the gathering
    testing.perform_enqueued()

    # Then one sibling ran on the pool, the other went to the broker
    assert [item.job for item in testing.enqueued()] == ["stepwise.perform_step"]
    testing.drain()
    assert ended(session, 4) == [("gather", "succeeded")] + [("sit", "succeeded")] * 3


def test_siblings_the_pool_no_longer_takes_run_on_the_thread_in_turn(
    session: Session, car: Car, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a pool that stops between the batch that claimed siblings for it and their hand-over
    local_runs.pool.start(4)
    original = running._run_nearby

    def stopping_first(*args: Any) -> list[int]:
        local_runs.pool.stop()
        return original(*args)

    monkeypatch.setattr(running, "_run_nearby", stopping_first)
    car.location = "alone"
    engine.later(car, "gather")
    session.commit()

    # When the gathering is admitted
    testing.perform_enqueued()

    # Then this thread ran them, claimed as they were: nothing sent, every step performed
    assert testing.enqueued() == []
    assert ended(session, 4) == [("gather", "succeeded")] + [("sit", "succeeded")] * 3


def test_a_sibling_whose_run_here_fails_unhandled_goes_to_the_broker_unclaimed(
    session: Session, car: Car, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a pool on which running a step fails with an error the engine does not handle
    local_runs.pool.start(4)
    original = running.run_steps
    pool_threads: list[str] = []

    def failing_on_the_pool(step_ids: list[int], *args: Any, **kwargs: Any) -> None:
        if threading.current_thread().name.startswith("stepwise-local"):
            pool_threads.append(threading.current_thread().name)
            raise ConnectionError("the database went away")
        original(step_ids, *args, **kwargs)

    monkeypatch.setattr(running, "run_steps", failing_on_the_pool)
    car.location = "alone"
    engine.later(car, "gather")
    session.commit()

    # When the gathering is admitted
    testing.perform_enqueued()
    deadline = time.monotonic() + 10
    while len(testing.enqueued()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)

    # Then both siblings went to the broker with their claims given up, and run from there
    assert len(pool_threads) == 2
    assert [item.job for item in testing.enqueued()] == ["stepwise.perform_step"] * 2
    session.expire_all()
    sent = [item.args[0] for item in testing.enqueued()]
    assert session.scalars(select(Step.leased_until).where(Step.id.in_(sent))).all() == [None, None]
    monkeypatch.setattr(running, "run_steps", original)
    testing.drain()
    assert ended(session, 4) == [("gather", "succeeded")] + [("sit", "succeeded")] * 3


def test_a_sibling_past_dramatiq_s_time_limit_on_the_pool_is_interrupted_and_sent_to_the_broker(
    session: Session, car: Car
) -> None:
    # Given a pool whose runs are under a time limit of 0.3 s (Dramatiq's own timer,
    # checking every 20 ms), and siblings that would run for 10 s on it
    middleware = TimeLimit(time_limit=300, interval=20)
    middleware.after_process_boot(dramatiq.get_broker())  # starts the timer's thread
    local_runs.pool.start(4, local_runs.TimeLimit(middleware.manager, 300))
    car.location = "lingering"
    engine.later(car, "gather")
    session.commit()

    # When the gathering is admitted
    started = time.monotonic()
    testing.perform_enqueued()
    while len(testing.enqueued()) < 2 and time.monotonic() < started + 8:
        time.sleep(0.05)

    # Then both siblings were interrupted well before their 10 s, and went to the broker
    # with their claims given up; from there they run to the end
    assert time.monotonic() - started < 8
    assert [item.job for item in testing.enqueued()] == ["stepwise.perform_step"] * 2
    session.expire_all()
    sent = [item.args[0] for item in testing.enqueued()]
    assert session.scalars(select(Step.leased_until).where(Step.id.in_(sent))).all() == [None, None]
    assert local_runs.pool.free() == 4
    testing.drain()
    assert ended(session, 4) == [("gather", "succeeded")] + [("linger", "succeeded")] * 3


def test_runs_on_the_pool_have_the_time_limit_of_a_step_s_message(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a worker process's broker with Dramatiq's TimeLimit middleware (10 minutes by
    # default) and the engine's middleware
    broker = dramatiq.get_broker()
    limit = next(m for m in broker.middleware if isinstance(m, TimeLimit))
    monkeypatch.setattr(worker_gc, "tune", lambda threshold: None)  # the process's collector stays
    process = WorkerProcess(local_job=engine_broker.PERFORM_STEP)
    process.after_process_boot(broker)

    # When its worker boots
    process.after_worker_boot(broker, dramatiq.Worker(broker, worker_threads=2))

    # Then its pool's runs are under the limit a message of stepwise.perform_step has
    assert local_runs.pool.time_limit == local_runs.TimeLimit(limit.manager, limit.time_limit)
    monkeypatch.setitem(broker.get_actor(engine_broker.PERFORM_STEP).options, "time_limit", 5_000)
    assert local_runs.TimeLimit.of(broker, engine_broker.PERFORM_STEP) == local_runs.TimeLimit(
        limit.manager, 5_000
    )


def test_a_batch_claims_no_more_siblings_than_the_pool_has_threads_free_for(session: Session) -> None:
    # Given two gatherings whose bodies ran, their three children each not yet admitted,
    # and a pool with two threads free
    config.admit_children_here = False  # the children stay due
    cars = [Car(location="alone"), Car(location="alone")]
    session.add_all(cars)
    session.commit()
    for car in cars:
        engine.later(car, "gather")
    session.commit()
    testing.perform_enqueued()
    local_runs.pool.start(2)
    units: list[Unit[Any]] = []
    for car in cars:
        unit: Unit[Any] = Unit(None, admit_due=True)
        assert unit.due is not None
        unit.due.extend(
            session.scalars(
                select(Invocation.id)
                .where(Invocation.name == "sit", Invocation.actor_id == str(car.id))
                .order_by(Invocation.id)
            )
        )
        units.append(unit)

    # When one batch admits both gatherings' children
    with db.transaction() as batch:
        batch_admission.admit_due(batch, units)

    # Then each first child is its unit's, and the pool gets two siblings in all
    assert [len(unit.opened) for unit in units] == [3, 1]
    assert [len(unit.nearby) for unit in units] == [2, 0]
    assert [len(unit.sends) for unit in units] == [0, 2]


@pytest.mark.parametrize("value", ["many", "-1"])
def test_a_pool_size_that_is_not_a_count_of_threads_is_refused(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(local_runs.THREADS_VARIABLE, value)
    with pytest.raises(ValueError, match="STEPWISE_LOCAL_THREADS"):
        local_runs.configured_threads(default=8)


def test_a_pool_has_as_many_threads_as_its_worker_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(local_runs.THREADS_VARIABLE, raising=False)
    assert local_runs.configured_threads(default=64) == 64
    monkeypatch.setenv(local_runs.THREADS_VARIABLE, "0")
    assert local_runs.configured_threads(default=64) == 0
