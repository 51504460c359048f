"""Given real worker processes and a step waiting for a signal, when every worker is killed
with SIGKILL while the step waits and started again, then a signal sent afterwards still
reaches the step (nothing held a worker while it waited; the wait and the inbox are rows),
and a signal sent while no worker runs waits in the inbox, and is consumed once workers
are back. Runs on Redis and on RabbitMQ (``brokers.py``)."""

from __future__ import annotations

import os
import signal as signals
import time
from collections.abc import Iterator

import pytest
from sqlalchemy import func, select
from sqlalchemy.engine import Engine

import engine
from engine import status, sweeper
from engine.models import Action, Invocation, Signal
from tests.integration.brokers import BrokerServer
from tests.integration.deliveries import given_trucks
from tests.integration.harness import WorkerGroup, fresh_database, wait_for, wait_until_ready
from tests.integration.workload import Truck, WorkloadBase


@pytest.fixture(scope="module")
def database_url(broker_server: BrokerServer) -> Iterator[str]:
    with fresh_database(f"stepwise_signals_{broker_server.key}", WorkloadBase.metadata) as url:
        yield url


def kill_all(workers: WorkerGroup) -> None:
    """SIGKILL the whole worker group, mid-whatever, and wait until it is gone."""
    assert workers.process is not None
    os.killpg(workers.process.pid, signals.SIGKILL)
    workers.process.wait(timeout=10)


def open_waits() -> int:
    with engine.new_session() as session:
        return (
            session.scalar(
                select(func.count()).where(Invocation.name == "signal", Invocation.concluded_at.is_(None))
            )
            or 0
        )


def statuses() -> list[str]:
    with engine.new_session() as session:
        return list(session.scalars(select(Action.status).where(Action.name == "clear").order_by(Action.id)))


def sweep_until(done: object, seconds: float = 60.0) -> None:
    """Sweep as a clock process would until ``done()``: Redis loses what it held when no worker took it."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if done():  # type: ignore[operator]
            return
        with engine.new_session() as session:
            sweeper.sweep(session)
        time.sleep(0.5)
    raise AssertionError(f"not done after {seconds:.0f} s: clear actions are {statuses()}")


def test_a_waiting_step_gets_its_signal_after_every_worker_was_killed(
    sa_engine: Engine, workers: WorkerGroup
) -> None:
    # Given two trucks waiting at the gate for customs
    trucks = given_trucks(2)
    with engine.new_session() as session:
        for truck in session.scalars(select(Truck).where(Truck.id.in_(trucks)).order_by(Truck.id)):
            engine.later(truck, "clear")
        session.commit()
    wait_for(lambda: open_waits() == 2, "both steps to wait for their signal", seconds=60)

    # When every worker is killed while they wait, one truck is cleared while none runs,
    # then workers start again and the other is refused
    kill_all(workers)
    first, second = (a for a in _clear_actions())
    engine.signal(first, "cleared", {"seal": 7}, by="customs", run_here=False)
    workers.start()
    wait_until_ready([workers])
    engine.signal(second, "refused", by="customs", run_here=False)

    # Then both signals reached their steps, once each, and both actions succeeded
    sweep_until(lambda: statuses() == [status.SUCCEEDED, status.SUCCEEDED])
    with engine.new_session() as session:
        cleared = dict(session.execute(select(Truck.id, Truck.cleared_by).where(Truck.id.in_(trucks))).all())
        assert sorted(cleared.values()) == ["cleared by customs: {'seal': 7}", "refused by customs: None"]
        consumed = session.scalars(select(Signal.consumed_at.is_not(None))).all()
        assert consumed == [True, True]
    assert open_waits() == 0


def _clear_actions() -> list[int]:
    with engine.new_session() as session:
        return list(session.scalars(select(Action.id).where(Action.name == "clear").order_by(Action.id)))
