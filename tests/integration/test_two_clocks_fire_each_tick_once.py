"""Given two real ``stepwise clock`` processes on one PostgreSQL database and one schedule
due every second, when they race for several seconds, then each tick fired exactly once:
one tick row, one invocation and one action per second, no second missed, whichever clock
won each. Real worker processes admit and perform the actions. Runs on Redis and on
RabbitMQ (``brokers.py``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.engine import Engine

import engine
from engine import schedules
from engine.models import Action, Invocation, Tick
from tests.integration.brokers import BrokerServer
from tests.integration.deliveries import given_trucks
from tests.integration.harness import ROOT, WorkerGroup, fresh_database, tail, wait_for, worker_env
from tests.integration.workload import WorkloadBase

STEPWISE = Path(sys.executable).with_name("stepwise")
RACE_SECONDS = 6


@pytest.fixture(scope="module")
def database_url(broker_server: BrokerServer) -> Iterator[str]:
    with fresh_database(f"stepwise_clocks_{broker_server.key}", WorkloadBase.metadata) as url:
        yield url


def start_clock(database_url: str, server: BrokerServer, log: Path) -> subprocess.Popen[bytes]:
    command = [
        str(STEPWISE),
        "clock",
        "--every",
        "1",
        "--poll",
        "0.05",
        "--import",
        "tests.integration.workload",
    ]
    with log.open("ab") as output:
        return subprocess.Popen(
            command,
            cwd=ROOT,
            env={**worker_env(database_url, server), "PYTHONPATH": str(ROOT)},
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop(process: subprocess.Popen[bytes]) -> None:
    os.killpg(process.pid, signal.SIGTERM)
    process.wait(timeout=20)


def fired_ticks() -> int:
    with engine.new_session() as session:
        return session.scalar(select(func.count()).select_from(Tick).where(Tick.outcome == "fired")) or 0


def test_two_clocks_racing_fire_each_tick_once(
    sa_engine: Engine,
    workers: WorkerGroup,
    database_url: str,
    broker_server: BrokerServer,
    tmp_path: Path,
) -> None:
    # Given a truck inspected every second, and two clock processes
    [truck] = given_trucks(1)
    schedules.create(
        "inspections",
        actor_type="Truck",
        actor_id=str(truck),
        action="inspect",
        every=1,
        overlap="allow",
        by="test",
    )
    logs = [tmp_path / "clock-1.log", tmp_path / "clock-2.log"]
    clocks = [start_clock(database_url, broker_server, log) for log in logs]
    try:
        # When they race for a few seconds of ticks
        wait_for(lambda: fired_ticks() >= 1, "the first tick", seconds=30)
        time.sleep(RACE_SECONDS)
        schedules.pause("inspections", by="test")
    finally:
        for process in clocks:
            stop(process)
    for log in logs:
        assert "Traceback" not in log.read_text(errors="replace"), tail(log)

    # Then each second's tick fired once, none was missed, and each made one action
    with engine.new_session() as session:
        ticks = session.scalars(select(Tick).order_by(Tick.due_at)).all()
    fired = [t for t in ticks if t.outcome == "fired"]
    assert len(fired) >= RACE_SECONDS, [(t.due_at, t.outcome) for t in ticks]
    assert [t.outcome for t in ticks] == ["fired"] * len(ticks)
    seconds = [(t.due_at - fired[0].due_at) for t in fired]
    assert seconds == [timedelta(seconds=n) for n in range(len(fired))], "a tick was missed or doubled"
    assert len({t.invocation_id for t in fired}) == len(fired)
    wait_for(lambda: done_actions() == len(fired), f"{len(fired)} inspections to finish", seconds=60)
    with engine.new_session() as session:
        invocations = session.scalar(
            select(func.count()).select_from(Invocation).where(Invocation.name == "inspect")
        )
        assert invocations == len(fired)
    # Both clocks were running all along (each printed its sync at start)
    assert all("schedules declared in code" in log.read_text() for log in logs)


def done_actions() -> int:
    with engine.new_session() as session:
        return (
            session.scalar(
                select(func.count())
                .select_from(Action)
                .where(Action.name == "inspect", Action.status == "succeeded")
            )
            or 0
        )
