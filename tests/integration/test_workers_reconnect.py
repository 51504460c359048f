"""Given PostgreSQL, a broker (Redis, then RabbitMQ) and running ``dramatiq`` workers, when
the broker or PostgreSQL restarts, then the workers reconnect and perform the work invoked
afterwards; the work whose message was never sent, or was lost, is sent again by the sweeper,
as production's clock process (``stepwise sweep --every``) would.

Issue 3, "Nothing is lost": workers reconnect after a PostgreSQL or a broker restart, and an
invocation committed while the broker was down is performed all the same (DESIGN invariant
4). A Redis restart loses every message it held; a RabbitMQ restart keeps its durable queues'
messages, but both close every connection. Runs the delivery workload with the fixtures of
``deliveries.py``, ``brokers.py`` and ``harness.py``.

These tests restart the services they use, which disturbs anything else using them. On a
shared machine, point them at services of their own: ``STEPWISE_TEST_POSTGRES`` (a URL) and
``STEPWISE_TEST_POSTGRES_RESTART`` (a shell command; the default is ``pg_ctlcluster … main
restart``), and the brokers' variables that ``brokers.py`` names.
"""

from __future__ import annotations

import os
import shutil
import time
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

import engine
from engine import status, sweeper
from engine.models import Action, ActionEvent
from tests.conftest import unavailable
from tests.integration.brokers import BrokerServer
from tests.integration.deliveries import deliver, given_trucks
from tests.integration.harness import WorkerGroup, fresh_database, postgres_ready, run, wait_for
from tests.integration.progress import wait_until_settled
from tests.integration.workload import ACTIONS_PER_DELIVERY, DOCKS, Truck, WorkloadBase

#: One delivery per dock: every delivery performs (none supersedes another).
DELIVERIES = DOCKS
DEADLINE_SECONDS = 90.0
#: The sweeper's grace in these tests: short, the workers being idle but for our work.
GRACE = timedelta(seconds=2)


# --- services -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def database_url(broker_server: BrokerServer) -> Iterator[str]:
    """A fresh PostgreSQL database with the engine's tables and the workload's, one per broker."""
    with fresh_database(f"stepwise_reconnect_{broker_server.key}", WorkloadBase.metadata) as url:
        yield url


def restart_postgres() -> None:
    """Restart the local cluster (or run ``STEPWISE_TEST_POSTGRES_RESTART``)."""
    command = os.environ.get("STEPWISE_TEST_POSTGRES_RESTART")
    clusters = sorted(os.listdir("/etc/postgresql")) if Path("/etc/postgresql").is_dir() else []
    if command:
        done = run("sh", "-c", command)
    elif clusters and shutil.which("pg_ctlcluster"):
        done = run("pg_ctlcluster", "--skip-systemctl-redirect", clusters[0], "main", "restart")
    else:
        unavailable("no local PostgreSQL cluster to restart (pg_ctlcluster, /etc/postgresql)")
    assert done.returncode == 0, f"PostgreSQL did not restart: {done.stdout}{done.stderr}"
    wait_for(postgres_ready, "PostgreSQL to accept connections")


# --- the workload ---------------------------------------------------------------------


class Sweeping:
    """Sweeps between looks at the progress, every ``GRACE``, as a clock process would."""

    def __init__(self) -> None:
        self.last = time.monotonic()

    def __call__(self, session: Session) -> None:
        if time.monotonic() - self.last > GRACE.total_seconds():
            sweeper.sweep(session, grace=GRACE)
            self.last = time.monotonic()


def wait_until_every_action_ends(workers: WorkerGroup, roots: int, *, sweep: bool) -> float:
    """Until every tree ended; with ``sweep``, sweeping as a clock process would. Returns
    the seconds it took."""
    started = time.monotonic()
    wait_until_settled(workers, roots, started + DEADLINE_SECONDS, tick=Sweeping() if sweep else None)
    return time.monotonic() - started


def assert_every_delivery_succeeded(roots: int) -> None:
    with engine.new_session() as session:
        assert Counter(session.scalars(select(Action.status))) == {
            status.SUCCEEDED: roots * ACTIONS_PER_DELIVERY
        }
        assert session.scalar(select(func.count()).where(Truck.deliveries != 1)) == 0


def recoveries() -> int:
    with engine.new_session() as session:
        return session.scalar(select(func.count()).where(ActionEvent.event == "recovered")) or 0


def report(label: str, seconds: float) -> None:
    print(f"\n{label}: the deliveries ended {seconds:.1f} s later; the sweeper sent {recoveries()} again")


# --- the tests ------------------------------------------------------------------------


def test_workers_carry_on_after_the_broker_restarts(
    sa_engine: Engine, workers: WorkerGroup, broker_server: BrokerServer
) -> None:
    # Given workers that performed deliveries
    trucks = given_trucks(2 * DELIVERIES)
    deliver(trucks[:DELIVERIES])
    wait_until_every_action_ends(workers, DELIVERIES, sweep=False)

    # When the broker restarts, closing every connection (Redis loses whatever it held)
    broker_server.stop()
    broker_server.start()

    # Then the deliveries invoked afterwards are performed, without the sweeper's help
    deliver(trucks[DELIVERIES:])
    seconds = wait_until_every_action_ends(workers, 2 * DELIVERIES, sweep=False)
    assert_every_delivery_succeeded(2 * DELIVERIES)
    assert workers.running()
    report(f"after a {broker_server.name} restart", seconds)


def test_deliveries_invoked_while_the_broker_is_down_are_performed_once_swept(
    sa_engine: Engine, workers: WorkerGroup, broker_server: BrokerServer
) -> None:
    # Given the broker down when the deliveries commit: their messages cannot be sent
    trucks = given_trucks(DELIVERIES)
    broker_server.stop()
    try:
        deliver(trucks)
    finally:
        broker_server.start()

    # When the sweeper runs, as the clock process would, after the grace period
    time.sleep(GRACE.total_seconds())
    seconds = wait_until_every_action_ends(workers, DELIVERIES, sweep=True)

    # Then every delivery was performed, each admission sent again (once, unless a sweep
    # came before the workers' consumers had reconnected)
    assert_every_delivery_succeeded(DELIVERIES)
    with engine.new_session() as session:
        jobs = Counter(
            event.data["job"]
            for event in session.scalars(select(ActionEvent).where(ActionEvent.event == "recovered"))
        )
    assert jobs["stepwise.admit"] >= DELIVERIES
    report(f"invoked while {broker_server.name} was down", seconds)


def test_workers_carry_on_after_postgresql_restarts(sa_engine: Engine, workers: WorkerGroup) -> None:
    # Given workers that performed deliveries, and more deliveries on their way
    trucks = given_trucks(3 * DELIVERIES)
    deliver(trucks[:DELIVERIES])
    wait_until_every_action_ends(workers, DELIVERIES, sweep=False)
    deliver(trucks[DELIVERIES : 2 * DELIVERIES])

    # When PostgreSQL restarts, closing every connection of the workers and of this process
    restart_postgres()

    # Then the deliveries invoked afterwards are performed, and with the sweeper's help
    # those the restart interrupted end too
    deliver(trucks[2 * DELIVERIES :])
    seconds = wait_until_every_action_ends(workers, 3 * DELIVERIES, sweep=True)
    assert_every_delivery_succeeded(3 * DELIVERIES)
    assert workers.running()
    report("after a PostgreSQL restart", seconds)
