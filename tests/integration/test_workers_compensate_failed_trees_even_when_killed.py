"""Given real worker processes (PostgreSQL, Redis or RabbitMQ) and parcels whose shipping
fails, each parcel compensates: it unpacks, then refunds the payment its charge returned,
each once, in that order, and ends failed. Killing every worker with SIGKILL in the middle
of the compensations loses nothing: once workers are back (and the sweeper re-sends what
the broker lost), every compensation ran exactly once and every parcel ended failed."""

from __future__ import annotations

import os
import signal as signals
import time
from collections.abc import Iterator
from datetime import timedelta

import dramatiq
import pytest
from sqlalchemy import func, select, text
from sqlalchemy.engine import Engine

import engine
from engine import db, status, sweeper
from engine.models import Action, Compensation
from tests.integration.brokers import BrokerServer
from tests.integration.compensation_workload import CompensationBase, Parcel, Undo
from tests.integration.harness import (
    WorkerGroup,
    fresh_database,
    running,
    wait_for,
    wait_until_ready,
    worker_env,
)

PARCELS = 6


@pytest.fixture(scope="module")
def database_url(broker_server: BrokerServer) -> Iterator[str]:
    with fresh_database(f"stepwise_compensation_{broker_server.key}", CompensationBase.metadata) as url:
        yield url


@pytest.fixture(scope="module")
def parcel_workers(
    database_url: str,
    broker_server: BrokerServer,
    broker_client: dramatiq.Broker,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[WorkerGroup]:
    group = WorkerGroup(
        "tests.integration.compensation_workload",
        tmp_path_factory.mktemp("workers") / "workers.log",
        worker_env(database_url, broker_server),
        broker_server,
        processes=2,
        threads=4,
    )
    with running(group):
        yield group


@pytest.fixture
def tables(database_url: str, parcel_workers: WorkerGroup) -> Engine:
    sa_engine = db.get_engine()
    names = [t.name for t in db.Base.metadata.sorted_tables] + [
        t.name for t in CompensationBase.metadata.sorted_tables
    ]
    with sa_engine.begin() as connection:
        connection.execute(text(f"TRUNCATE {', '.join(names)} CASCADE"))
    return sa_engine


def undos() -> int:
    with engine.new_session() as session:
        return session.scalar(select(func.count()).select_from(Undo)) or 0


def parcel_statuses() -> list[str]:
    with engine.new_session() as session:
        return list(session.scalars(select(Action.status).where(Action.name == "send").order_by(Action.id)))


def test_parcels_compensate_in_reverse_order_once_each_even_when_every_worker_is_killed(
    tables: Engine, parcel_workers: WorkerGroup
) -> None:
    # Given parcels whose shipping fails
    with engine.new_session() as session:
        parcels = [Parcel() for _ in range(PARCELS)]
        session.add_all(parcels)
        session.commit()
        ids = [p.id for p in parcels]
        for parcel in parcels:
            engine.later(parcel, "send")
        session.commit()

    # When every worker is killed once the first compensations ran, then started again
    wait_for(lambda: undos() >= 2, "the first compensations to run", seconds=60)
    assert parcel_workers.process is not None
    os.killpg(parcel_workers.process.pid, signals.SIGKILL)
    parcel_workers.process.wait(timeout=10)
    parcel_workers.start()
    wait_until_ready([parcel_workers])

    # Then, sweeping as a clock process would, every parcel ends failed, compensated
    deadline = time.monotonic() + 120
    while parcel_statuses() != [status.FAILED] * PARCELS:
        assert time.monotonic() < deadline, f"parcels are {parcel_statuses()}\n{parcel_workers.tail(40)}"
        with engine.new_session() as session:
            sweeper.sweep(session, grace=timedelta(seconds=2))
            session.commit()
        time.sleep(0.5)

    # And each parcel was unpacked, then refunded its own payment: once each, in that order
    with engine.new_session() as session:
        done: dict[int, list[str]] = {}
        for undo in session.scalars(select(Undo).order_by(Undo.id)):
            done.setdefault(undo.parcel_id, []).append(undo.what)
        assert done == {i: ["unpack", f"refund pay-{i}"] for i in ids}
        assert set(session.scalars(select(Compensation.status))) == {"succeeded"}
