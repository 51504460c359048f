"""Given PostgreSQL, a broker (Redis, then RabbitMQ) and one ``dramatiq`` worker process of 16
threads whose pool holds 3 connections (``STEPWISE_POOL_SIZE``, a bound: no overflow), when
a burst of deliveries whose bodies write runs, then every delivery ends, the process never
opens a fourth connection, and nothing waits forever or fails.

``stepwise worker`` runs more threads than connections (engine/cli.py): a thread holds a
connection only while its own body or transition runs, never while it waits for its
process's group-commit batch, so threads beyond the pool wait their turn and no cycle of
waits forms between the batch and the bodies.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator

import dramatiq
import pytest
from sqlalchemy import select, text
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

import engine
from engine import db, status
from engine.models import Action, Invocation
from tests.integration.brokers import BrokerServer
from tests.integration.deliveries import deliver, given_trucks
from tests.integration.harness import WorkerGroup, fresh_database, running, worker_env
from tests.integration.progress import wait_until_settled
from tests.integration.workload import Truck, WorkloadBase

THREADS = 16
POOL = 3
DELIVERIES = 120
#: The workers' connections name themselves (libpq's PGAPPNAME), so they can be counted.
APPLICATION = "stepwise-narrow-pool"


@pytest.fixture(scope="module")
def database_url(broker_server: BrokerServer) -> Iterator[str]:
    with fresh_database(f"stepwise_narrow_pool_{broker_server.key}", WorkloadBase.metadata) as url:
        yield url


@pytest.fixture(scope="module")
def workers(
    database_url: str,
    broker_server: BrokerServer,
    broker_client: dramatiq.Broker,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[WorkerGroup]:
    """One process of 16 threads and a pool of 3 connections (overrides deliveries.py's)."""
    env = {
        **worker_env(database_url, broker_server),
        db.POOL_SIZE_VARIABLE: str(POOL),
        "PGAPPNAME": APPLICATION,
    }
    group = WorkerGroup(
        "tests.integration.workload",
        tmp_path_factory.mktemp("narrow-pool") / "workers.log",
        env,
        broker_server,
        processes=1,
        threads=THREADS,
        options=("--worker-shutdown-timeout", "10000"),
    )
    with running(group):
        yield group


def test_a_burst_of_writing_bodies_ends_with_more_threads_than_connections(
    sa_engine: Engine, workers: WorkerGroup
) -> None:
    # Given 120 trucks queueing at ten docks, each delivery's bodies writing rows
    truck_ids = given_trucks(DELIVERIES)
    errors_before = len(workers.errors())
    peak = 0

    def count_connections(session: Session) -> None:
        nonlocal peak
        opened = session.scalar(
            text("SELECT count(*) FROM pg_stat_activity WHERE application_name = :name"),
            {"name": APPLICATION},
        )
        session.rollback()
        peak = max(peak, int(opened or 0))

    # When they are all invoked at once, for 16 threads sharing 3 connections
    deliver(truck_ids)
    wait_until_settled(workers, DELIVERIES, time.monotonic() + 180, tick=count_connections)

    with engine.new_session() as session:
        count_connections(session)
        # Then every invocation ends with a delivery that succeeded, its whole tree too
        final = session.scalars(
            select(Action.status).join(Invocation, Invocation.action_id == Action.id).where(Action.root)
        ).all()
        assert Counter(final) == {status.SUCCEEDED: DELIVERIES}
        assert set(session.scalars(select(Action.status).where(~Action.root))) == {status.SUCCEEDED}
        delivered = session.scalars(select(Truck.deliveries)).all()
        assert sum(delivered) == Counter(
            session.scalars(select(Action.status).where(Action.name == "deliver"))
        )[status.SUCCEEDED]

    # and the process kept to its 3 connections, which it did use, with no error or retry
    assert 1 <= peak <= POOL
    assert workers.errors()[errors_before:] == []
