"""Given PostgreSQL, the Redis broker and running ``dramatiq`` workers, when Redis or
PostgreSQL restarts, then the workers reconnect and perform the work invoked afterwards;
the work whose message the restart lost is sent again by the sweeper, as production's clock
process (``stepwise sweep --every``) would.

Issue 3, "Nothing is lost": workers reconnect after a PostgreSQL or a broker restart, and an
invocation committed while the broker was down is performed all the same (DESIGN invariant
4). Reuses the delivery workload and the fixtures of ``test_workers_keep_lanes_exclusive``,
except the database's: its administrative connection is opened only when needed, since
restarting PostgreSQL closes every open connection.

These tests restart the services they use, which disturbs anything else using them. On a
shared machine, point them at services of their own: ``STEPWISE_TEST_POSTGRES`` and
``STEPWISE_TEST_REDIS`` (URLs), ``STEPWISE_TEST_POSTGRES_RESTART`` and
``STEPWISE_TEST_REDIS_START`` (shell commands; the defaults are ``pg_ctlcluster … main
restart`` and ``scripts/services``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from sqlalchemy import func, select
from sqlalchemy.engine import Engine

import engine
from engine import status, sweeper
from engine.models import Action, ActionEvent
from tests.conftest import POSTGRES_ADMIN_URL, unavailable
from tests.integration import test_workers_keep_lanes_exclusive as lanes
from tests.integration.test_workers_keep_lanes_exclusive import ROOT, Workers, given_trucks, progress, stuck
from tests.integration.workload import ACTIONS_PER_DELIVERY, DOCKS, Truck, WorkloadBase

#: One delivery per dock: every delivery performs (none supersedes another).
DELIVERIES = DOCKS
DEADLINE_SECONDS = 90.0
#: The sweeper's grace in these tests: short, the workers being idle but for our work.
GRACE = timedelta(seconds=2)


# --- services -------------------------------------------------------------------------

redis_url = lanes.redis_url
redis_broker = lanes.redis_broker
workers = lanes.workers
sa_engine = lanes.sa_engine


def admin() -> psycopg.Connection[tuple[Any, ...]]:
    try:
        return psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as error:
        unavailable(f"PostgreSQL is not reachable at {POSTGRES_ADMIN_URL}: {error}")
        raise


@pytest.fixture(scope="module")
def database_url() -> Iterator[str]:
    """A fresh PostgreSQL database with the engine's tables and the workload's (overrides
    the fixture of test_workers_keep_lanes_exclusive: no connection is held across a test)."""
    name = f"stepwise_reconnect_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    with admin() as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    url = f"{POSTGRES_ADMIN_URL.rsplit('/', 1)[0]}/{name}"
    sa_engine = engine.configure(url, pool_size=5)
    engine.create_all(sa_engine)
    WorkloadBase.metadata.create_all(sa_engine)
    yield url
    sa_engine.dispose()
    wait_for(postgres_ready, "PostgreSQL to accept connections")
    with admin() as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def wait_for(ready: Callable[[], bool], what: str, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.2)
    pytest.fail(f"timed out after {seconds:.0f} s waiting for {what}")


def redis_ready(url: str) -> bool:
    client = redis.Redis.from_url(url, socket_connect_timeout=1)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


def postgres_ready() -> bool:
    try:
        psycopg.connect(POSTGRES_ADMIN_URL, connect_timeout=1).close()
        return True
    except psycopg.OperationalError:
        return False


def run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False, cwd=ROOT)


def stop_redis(url: str) -> None:
    if shutil.which("redis-cli") is None:
        unavailable("redis-cli is not installed: the broker cannot be restarted")
    run("redis-cli", "-u", url, "shutdown", "nosave")
    wait_for(lambda: not redis_ready(url), "Redis to stop")


def start_redis(url: str) -> None:
    """Start Redis as this machine's services script does (or ``STEPWISE_TEST_REDIS_START``)."""
    command = os.environ.get("STEPWISE_TEST_REDIS_START")
    done = run("sh", "-c", command) if command else run(str(ROOT / "scripts" / "services"))
    assert done.returncode == 0, f"Redis did not start: {done.stdout}{done.stderr}"
    wait_for(lambda: redis_ready(url), "Redis to start")


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


def deliver(truck_ids: list[int]) -> None:
    with engine.new_session() as session:
        for truck in session.scalars(select(Truck).where(Truck.id.in_(truck_ids)).order_by(Truck.id)):
            engine.later(truck, "deliver", truck.number)
        session.commit()


def wait_until_every_action_ends(workers: Workers, roots: int, *, sweep: bool) -> float:
    """Until every tree ended; with ``sweep``, sweeping every ``GRACE`` as a clock process
    would. Returns the seconds it took."""
    started = time.monotonic()
    last_sweep = started
    with engine.new_session() as session:
        while True:
            current = progress(session)
            session.rollback()
            if current.settled(roots):
                return time.monotonic() - started
            if time.monotonic() - started > DEADLINE_SECONDS or workers.process.poll() is not None:
                pytest.fail(f"not every action ended: {current}\n{stuck(session)}\n{workers.tail()}")
            if sweep and time.monotonic() - last_sweep > GRACE.total_seconds():
                sweeper.sweep(session, grace=GRACE)
                last_sweep = time.monotonic()
            time.sleep(0.2)


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


def test_workers_carry_on_after_redis_restarts(sa_engine: Engine, workers: Workers, redis_url: str) -> None:
    # Given workers that performed deliveries
    trucks = given_trucks(2 * DELIVERIES)
    deliver(trucks[:DELIVERIES])
    wait_until_every_action_ends(workers, DELIVERIES, sweep=False)

    # When Redis restarts, losing whatever it held
    stop_redis(redis_url)
    start_redis(redis_url)

    # Then the deliveries invoked afterwards are performed, without the sweeper's help
    deliver(trucks[DELIVERIES:])
    seconds = wait_until_every_action_ends(workers, 2 * DELIVERIES, sweep=False)
    assert_every_delivery_succeeded(2 * DELIVERIES)
    assert workers.process.poll() is None
    report("after a Redis restart", seconds)


def test_deliveries_invoked_while_redis_is_down_are_performed_once_swept(
    sa_engine: Engine, workers: Workers, redis_url: str
) -> None:
    # Given Redis down when the deliveries commit: their messages cannot be sent
    trucks = given_trucks(DELIVERIES)
    stop_redis(redis_url)
    try:
        deliver(trucks)
    finally:
        start_redis(redis_url)

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
    report("invoked while Redis was down", seconds)


def test_workers_carry_on_after_postgresql_restarts(sa_engine: Engine, workers: Workers) -> None:
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
    assert workers.process.poll() is None
    report("after a PostgreSQL restart", seconds)
