"""The delivery workload's side of the tests that run it (lanes and reconnect): its worker
processes, empty tables for each test, and trucks to deliver. ``conftest.py`` registers the
fixtures; each test module brings its own ``database_url``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import dramatiq
import pytest
from sqlalchemy import select, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

import engine
from engine import db
from tests.integration.brokers import BrokerServer
from tests.integration.harness import WorkerGroup, running, worker_env
from tests.integration.workload import CRATES, Crate, Truck, WorkloadBase

PROCESSES = 2
THREADS = 4


@pytest.fixture(scope="module")
def workers(
    database_url: str,
    broker_server: BrokerServer,
    broker_client: dramatiq.Broker,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[WorkerGroup]:
    """``dramatiq engine.jobs tests.integration.workload -p 2 -t 4``, ready for messages."""
    group = WorkerGroup(
        "tests.integration.workload",
        tmp_path_factory.mktemp("workers") / "workers.log",
        worker_env(database_url, broker_server),
        broker_server,
        processes=PROCESSES,
        threads=THREADS,
        options=("--worker-shutdown-timeout", "10000"),
    )
    with running(group):
        yield group


@pytest.fixture
def sa_engine(database_url: str, workers: WorkerGroup) -> Iterator[Engine]:
    """The integration database with empty tables, for one test. Identities go on (no
    RESTART IDENTITY): a message left over from an earlier test names rows that are gone,
    so a worker that takes it does nothing."""
    sa_engine = db.get_engine()
    tables = [t.name for t in db.Base.metadata.sorted_tables] + [
        t.name for t in WorkloadBase.metadata.sorted_tables
    ]
    for attempt in range(1, 6):
        try:
            with sa_engine.begin() as connection:
                connection.execute(text(f"TRUNCATE {', '.join(tables)} CASCADE"))
            break
        except DBAPIError as error:
            # Workers still finishing an earlier (failed) test: PostgreSQL picked us as
            # the deadlock's victim.
            if attempt == 5 or not db.is_retryable(error):
                raise
            time.sleep(1)
    yield sa_engine


def given_trucks(count: int) -> list[int]:
    with engine.new_session() as session:
        trucks = [Truck(number=n, crates=[Crate() for _ in range(CRATES)]) for n in range(count)]
        session.add_all(trucks)
        session.commit()
        return [truck.id for truck in trucks]


def deliver(truck_ids: list[int]) -> None:
    """Invoke every delivery in one transaction; the admissions go to the broker after commit."""
    with engine.new_session() as session:
        for truck in session.scalars(select(Truck).where(Truck.id.in_(truck_ids)).order_by(Truck.id)):
            engine.later(truck, "deliver", truck.number)
        session.commit()
