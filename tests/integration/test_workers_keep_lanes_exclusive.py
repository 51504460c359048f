"""Given PostgreSQL, the Redis broker and two ``dramatiq`` worker processes of four threads
each, when hundreds of deliveries queue at ten shared docks, each with a tree of children,
then every action ends, and no two actions of one lane ever perform at the same time.

The acceptance test of the engine (DESIGN invariants 1, 2, 3 and 4 under real concurrency).
Each action records when it performed (``tests/integration/workload.py``), with PostgreSQL's
``clock_timestamp()`` as the one clock of every worker; overlaps are looked for afterwards,
in those intervals and in the engine's own ``started_at`` / ``completed_at``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from dramatiq.brokers.redis import RedisBroker
from sqlalchemy import func, select, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

import engine
from engine import broker, db, status, testing
from engine.models import Action, Invocation, Performance, Step
from tests.conftest import POSTGRES_ADMIN_URL, unavailable
from tests.integration.workload import (
    ACTIONS_PER_DELIVERY,
    CRATES,
    DOCKS,
    STEPS_PER_DELIVERY,
    Crate,
    LaneInterval,
    Truck,
    WorkloadBase,
)

REDIS_URL = os.environ.get("STEPWISE_TEST_REDIS", "redis://127.0.0.1:6379/5")
REDIS_CLAIM = "stepwise:integration-run"
PROCESSES = 2
THREADS = 4
DELIVERIES = 500
BURST = 200
DEADLINE_SECONDS = 180.0
ROOT = Path(__file__).resolve().parents[2]


# --- services -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def database_url() -> Iterator[str]:
    """A fresh PostgreSQL database with the engine's tables and the workload's."""
    name = f"stepwise_integration_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    try:
        admin = psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as error:
        unavailable(f"PostgreSQL is not reachable at {POSTGRES_ADMIN_URL}: {error}")
    admin.execute(f'CREATE DATABASE "{name}"')
    url = f"{POSTGRES_ADMIN_URL.rsplit('/', 1)[0]}/{name}"
    sa_engine = engine.configure(url, pool_size=5)
    engine.create_all(sa_engine)
    WorkloadBase.metadata.create_all(sa_engine)
    yield url
    sa_engine.dispose()
    admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.close()


def claim_redis_database(client: redis.Redis, owner: str) -> bool:
    """Take this Redis database for one run and empty it, or return False when another run
    holds it: two runs' workers sharing a queue would take each other's messages and look
    their ids up in the wrong PostgreSQL database."""
    if not client.set(REDIS_CLAIM, owner, nx=True, ex=int(DEADLINE_SECONDS) * 3):
        return False
    for key in client.scan_iter(count=1000):
        if key != REDIS_CLAIM.encode():
            client.delete(key)
    return True


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    """An empty Redis database of our own: ``STEPWISE_TEST_REDIS``'s, or the next free one."""
    base, _, first = REDIS_URL.rpartition("/")
    if not first.isdigit():
        base, first = REDIS_URL.rstrip("/"), "0"
    owner = f"{os.getpid()}-{uuid.uuid4().hex[:6]}"
    for number in range(int(first or 0), 16):
        url = f"{base}/{number}"
        client = redis.Redis.from_url(url, socket_connect_timeout=2)
        try:
            claimed = claim_redis_database(client, owner)
        except redis.RedisError as error:
            client.close()
            unavailable(f"Redis is not reachable at {url}: {error}")
        if claimed:
            break
        client.close()
    else:
        pytest.fail(f"every Redis database from {REDIS_URL} to 15 is held by another run")
    yield url
    client.flushdb()
    client.close()


@pytest.fixture(scope="module")
def redis_broker(redis_url: str) -> Iterator[RedisBroker]:
    """The engine's messages go to Redis from this process too (``later()`` sends them)."""
    real = RedisBroker(url=redis_url)  # type: ignore[no-untyped-call]
    broker.use(real)
    yield real
    testing.setup()
    real.close()


@dataclass
class Workers:
    process: subprocess.Popen[bytes]
    log: Path
    redis_url: str = ""

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def errors(self) -> list[str]:
        """The log's errors, warnings (Dramatiq's retries) and tracebacks."""
        text = self.log.read_text(errors="replace").splitlines()
        return [line for line in text if "ERROR" in line or "Traceback" in line or "WARNING" in line]

    def diagnosis(self, session: Session) -> str:
        """Why work may have stopped: what is left in the tables, which database sessions
        wait on which, whose brokers use this Redis database, and the workers' last words."""
        client = redis.Redis.from_url(self.redis_url, socket_connect_timeout=2)
        try:
            # Every broker that talked to this Redis database recently: this process's and
            # one per worker process. More means another run is taking our messages.
            brokers = client.zcard("dramatiq:__heartbeats__")
            queued = client.llen("dramatiq:stepwise")
        except redis.RedisError as error:
            brokers = queued = f"unknown ({error})"  # type: ignore[assignment]
        finally:
            client.close()
        waiting = "\n".join(str(tuple(row)) for row in session.execute(text(DATABASE_SESSIONS)))
        return (
            f"{stuck(session)}\nbrokers on {self.redis_url}: {brokers} (expected {PROCESSES + 1}); "
            f"messages queued: {queued}\ndatabase sessions (pid, state, wait, blocked by, age, query):\n"
            f"{waiting}\nworkers' log {self.log}:\n{self.tail()}"
        )


@pytest.fixture(scope="module")
def workers(
    database_url: str, redis_url: str, redis_broker: RedisBroker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Workers]:
    """``dramatiq engine.jobs tests.integration.workload -p 2 -t 4``, ready for messages."""
    log = tmp_path_factory.mktemp("workers") / "workers.log"
    env = {**os.environ, "DATABASE_URL": database_url, "REDIS_URL": redis_url, "PYTHONUNBUFFERED": "1"}
    command = [
        sys.executable,
        "-m",
        "dramatiq",
        "engine.jobs",
        "tests.integration.workload",
        "--processes",
        str(PROCESSES),
        "--threads",
        str(THREADS),
        "--worker-shutdown-timeout",
        "10000",
    ]
    with log.open("wb") as output:
        process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
    running = Workers(process, log, redis_url)
    try:
        wait_until_ready(running)
        yield running
    finally:
        stop(running)
        print(f"\nworker log: {log}")


def wait_until_ready(workers: Workers, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if workers.process.poll() is not None:
            pytest.fail(f"the workers exited with {workers.process.returncode}:\n{workers.tail()}")
        if workers.log.read_text(errors="replace").count("Worker process is ready for action.") >= PROCESSES:
            return
        time.sleep(0.1)
    pytest.fail(f"the workers were not ready after {seconds:.0f} s:\n{workers.tail()}")


def stop(workers: Workers) -> None:
    """SIGTERM (Dramatiq finishes the messages in hand), then SIGKILL to the process group
    this fixture started."""
    process = workers.process
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


@pytest.fixture
def sa_engine(database_url: str, workers: Workers) -> Iterator[Engine]:
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


# --- the workload ---------------------------------------------------------------------


def given_trucks(count: int) -> list[int]:
    with engine.new_session() as session:
        trucks = [Truck(number=n, crates=[Crate() for _ in range(CRATES)]) for n in range(count)]
        session.add_all(trucks)
        session.commit()
        return [truck.id for truck in trucks]


def deliver_one_queued_per_dock(workers: Workers, truck_ids: list[int], deadline: float) -> None:
    """Invoke every delivery, sending the next one to a dock as soon as the previous one
    there has started performing: each dock always has one delivery performing and one
    queued. (Stepped's rule: a newer queued action supersedes the older queued ones of its
    lane, so a dock never holds more than one queued delivery that will perform.)"""
    with engine.new_session() as session:
        lines: dict[int, deque[Truck]] = {dock: deque() for dock in range(DOCKS)}
        for truck in session.scalars(select(Truck).where(Truck.id.in_(truck_ids)).order_by(Truck.id)):
            lines[truck.number % DOCKS].append(truck)
        queued: dict[int, int] = {}  # dock -> its delivery's invocation, not yet performing
        while any(lines.values()):
            if time.monotonic() > deadline:
                pytest.fail(
                    f"deliveries still waiting to be invoked at the deadline: {lines_left(lines)}\n"
                    f"{workers.diagnosis(session)}"
                )
            started = set(
                session.scalars(
                    select(Invocation.id)
                    .join(Action, Action.id == Invocation.action_id)
                    .where(Invocation.id.in_(queued.values()), Action.status != status.PENDING)
                )
            )
            queued = {dock: invocation for dock, invocation in queued.items() if invocation not in started}
            sent = {}
            for dock, line in lines.items():
                if line and dock not in queued:
                    truck = line.popleft()
                    sent[dock] = engine.later(truck, "deliver", truck.number)
            session.commit()  # the admission messages go to Redis now
            queued.update({dock: invocation.id for dock, invocation in sent.items()})
            time.sleep(0.05)


def lines_left(lines: dict[int, deque[Truck]]) -> dict[int, int]:
    return {dock: len(line) for dock, line in lines.items() if line}


def deliver_all_at_once(truck_ids: list[int]) -> None:
    with engine.new_session() as session:
        for truck in session.scalars(select(Truck).where(Truck.id.in_(truck_ids)).order_by(Truck.id)):
            engine.later(truck, "deliver", truck.number)
        session.commit()


@dataclass
class Progress:
    actions: int
    unfinished: int
    unsettled: int

    def settled(self, roots: int) -> bool:
        return self.actions >= roots and self.unfinished == 0 and self.unsettled == 0


def progress(session: Session) -> Progress:
    return Progress(
        actions=session.scalar(select(func.count()).select_from(Action)) or 0,
        unfinished=session.scalar(
            select(func.count()).select_from(Action).where(Action.status.in_(status.INCOMPLETE))
        )
        or 0,
        # Requested but not admitted, or a child whose parent step was not told it ended.
        unsettled=session.scalar(
            select(func.count())
            .select_from(Invocation)
            .where(
                Invocation.settled_at.is_(None)
                | (Invocation.parent_step_id.is_not(None) & Invocation.concluded_at.is_(None))
            )
        )
        or 0,
    )


def wait_until_every_action_ends(workers: Workers, roots: int, deadline: float) -> Progress:
    with engine.new_session() as session:
        while True:
            current = progress(session)
            session.rollback()
            if current.settled(roots):
                return current
            if time.monotonic() > deadline or workers.process.poll() is not None:
                pytest.fail(f"not every action ended: {current}\n{workers.diagnosis(session)}")
            time.sleep(0.2)


def stuck(session: Session) -> str:
    """What an unfinished run left behind, to diagnose it."""
    statuses = Counter(session.scalars(select(Action.status)))
    lanes = session.scalars(select(Performance).limit(20)).all()
    unfinished = session.scalars(
        select(Action).where(Action.status.in_(status.INCOMPLETE)).order_by(Action.id).limit(20)
    ).all()
    open_steps = session.scalars(select(Step).where(Step.completed_at.is_(None)).limit(20)).all()
    unsettled = session.scalars(select(Invocation).where(Invocation.settled_at.is_(None)).limit(20)).all()
    return (
        f"statuses: {dict(statuses)}\nlanes: {lanes}\nunfinished: {unfinished}\n"
        f"open steps: {open_steps}\nunsettled invocations: {unsettled}"
    )


# --- what is checked afterwards -------------------------------------------------------

DATABASE_SESSIONS = """
SELECT pid, state, wait_event_type || ':' || wait_event, pg_blocking_pids(pid),
       now() - xact_start, left(query, 200)
FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
ORDER BY pid
"""

OVERLAPPING_INTERVALS = """
SELECT a.concurrency_key, a.action_id, a.started_at, a.ended_at, b.action_id, b.started_at, b.ended_at
FROM workload_lane_intervals a
JOIN workload_lane_intervals b
  ON a.concurrency_key = b.concurrency_key AND a.id < b.id
 AND a.started_at < b.ended_at AND b.started_at < a.ended_at
LIMIT 20
"""

OVERLAPPING_ACTIONS = """
SELECT a.concurrency_key, a.id, a.started_at, a.completed_at, b.id, b.started_at, b.completed_at
FROM stepwise_actions a
JOIN stepwise_actions b
  ON a.concurrency_key = b.concurrency_key AND a.id < b.id
 AND a.started_at < b.completed_at AND b.started_at < a.completed_at
WHERE a.started_at IS NOT NULL AND b.started_at IS NOT NULL
LIMIT 20
"""

PEAK_PARALLELISM = """
SELECT max(running) FROM (
  SELECT sum(change) OVER (ORDER BY at, change) AS running FROM (
    SELECT started_at AS at, 1 AS change FROM workload_lane_intervals
    UNION ALL SELECT ended_at, -1 FROM workload_lane_intervals
  ) edges
) timeline
"""


def overlaps(session: Session, query: str) -> list[Any]:
    return list(session.execute(text(query)).all())


def assert_one_performing_per_lane_is_a_database_constraint(session: Session) -> None:
    definition = session.scalar(
        text(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'uq_stepwise_actions_one_performing_per_lane'"
        )
    )
    assert definition is not None, "the partial unique index on performing actions is missing"
    assert "CREATE UNIQUE INDEX" in definition
    assert "(concurrency_key)" in definition
    assert "WHERE ((status)::text = 'performing'::text)" in definition


def report(label: str, actions: int, seconds: float, peak: int | None) -> None:
    print(
        f"\n{label}: {actions} actions ended in {seconds:.1f} s ({actions / seconds:.0f} actions/s) on "
        f"{PROCESSES} processes x {THREADS} threads; at most {peak} actions performed at once"
    )


# --- the tests ------------------------------------------------------------------------


def test_every_delivery_ends_and_no_two_actions_of_a_lane_ever_perform_at_once(
    sa_engine: Engine, workers: Workers
) -> None:
    """The engine's acceptance: 500 root actions with children, on 10 shared concurrency keys,
    2 worker processes of 4 threads. Each dock gets its next delivery once the previous one
    there has started: a newer queued action supersedes older queued ones (spec §4.2), so
    this keeps every delivery performing (the burst test below covers superseding)."""
    # Given 500 trucks, each with two crates, queueing at ten shared docks
    truck_ids = given_trucks(DELIVERIES)
    errors_before = len(workers.errors())
    started = time.monotonic()
    deadline = started + DEADLINE_SECONDS

    # When each is delivered by the workers, every dock always holding a queued delivery
    deliver_one_queued_per_dock(workers, truck_ids, deadline)
    ended = wait_until_every_action_ends(workers, DELIVERIES, deadline)
    elapsed = time.monotonic() - started

    # Then every action of every tree succeeded, exactly once, and every lane is gone
    with engine.new_session() as session:
        expected = DELIVERIES * ACTIONS_PER_DELIVERY
        assert ended.actions == expected
        assert Counter(session.scalars(select(Action.status))) == {status.SUCCEEDED: expected}
        assert Counter(session.scalars(select(Action.name))) == {
            "deliver": DELIVERIES,
            "inspect": DELIVERIES,
            "stow": DELIVERIES * CRATES,
            "unload": DELIVERIES * CRATES,
        }
        assert session.scalar(select(func.count()).where(Action.root.is_(True))) == DELIVERIES
        assert Counter(session.scalars(select(Invocation.outcome))) == {"admitted": expected}
        assert session.scalar(select(func.count()).select_from(Performance)) == 0
        steps = session.execute(
            select(Step.status, Step.pending_actions_count, Step.completed_at.is_not(None))
        ).all()
        assert Counter(steps) == {(status.SUCCEEDED, 0, True): DELIVERIES * STEPS_PER_DELIVERY}
        trucks = Counter(session.execute(select(Truck.deliveries, Truck.inspections)).all())
        assert trucks == {(1, 1): DELIVERIES}
        crates = Counter(session.execute(select(Crate.stowed, Crate.unloaded)).all())
        assert crates == {(1, 1): DELIVERIES * CRATES}

        # and no two actions of one lane performed at the same time, in the intervals the
        # actions recorded and in the engine's own timestamps
        assert session.scalar(select(func.count()).select_from(LaneInterval)) == expected
        assert session.scalar(select(func.count()).where(LaneInterval.ended_at.is_(None))) == 0
        assert overlaps(session, OVERLAPPING_INTERVALS) == []
        assert overlaps(session, OVERLAPPING_ACTIONS) == []
        assert Counter(
            session.scalars(
                select(LaneInterval.concurrency_key).where(LaneInterval.concurrency_key.like("dock/%"))
            )
        ) == {f"dock/{dock}": DELIVERIES // DOCKS for dock in range(DOCKS)}
        assert_one_performing_per_lane_is_a_database_constraint(session)
        peak = session.scalar(text(PEAK_PARALLELISM))
        performers = set(session.scalars(select(LaneInterval.worker)))

    # and both worker processes, several threads each, did the work, some of it at once,
    # and logged no error or retry
    assert len({performer.split("/")[0] for performer in performers}) == PROCESSES
    assert len(performers) > PROCESSES
    assert peak is not None and peak > 1, "the workers never performed two actions at once"
    assert workers.process.poll() is None
    assert workers.errors()[errors_before:] == []
    report("one queued delivery per dock", expected, elapsed, peak)


def test_a_burst_of_deliveries_supersedes_queued_ones_and_still_ends_every_action(
    sa_engine: Engine, workers: Workers
) -> None:
    """Every delivery is invoked at once: in each dock's lane the newer queued delivery
    supersedes the older ones (Stepped's rule, spec §4.2), under real contention. A root's
    invocation then points at the delivery that superseded it."""
    # Given 200 trucks queueing at ten shared docks
    truck_ids = given_trucks(BURST)
    errors_before = len(workers.errors())
    started = time.monotonic()

    # When all their deliveries are invoked in one transaction
    deliver_all_at_once(truck_ids)
    ended = wait_until_every_action_ends(workers, BURST, started + DEADLINE_SECONDS)
    elapsed = time.monotonic() - started

    with engine.new_session() as session:
        # Then each delivery was admitted, and ended succeeded or superseded
        deliveries = Counter(session.scalars(select(Action.status).where(Action.name == "deliver")))
        assert sum(deliveries.values()) == BURST
        assert set(deliveries) <= {status.SUCCEEDED, status.SUPERSEDED}
        succeeded = deliveries[status.SUCCEEDED]
        assert DOCKS <= succeeded < BURST

        # and every invocation ends with a delivery that succeeded
        final = session.scalars(
            select(Action.status).join(Invocation, Invocation.action_id == Action.id).where(Action.root)
        ).all()
        assert Counter(final) == {status.SUCCEEDED: BURST}

        # and only the deliveries that succeeded performed, each with its whole tree
        assert ended.actions == BURST + succeeded * (ACTIONS_PER_DELIVERY - 1)
        assert Counter(session.scalars(select(Action.status).where(~Action.root))) == {
            status.SUCCEEDED: succeeded * (ACTIONS_PER_DELIVERY - 1)
        }
        assert (
            session.scalar(
                select(func.count()).where(Action.status == status.SUPERSEDED, Action.started_at.is_not(None))
            )
            == 0
        )
        assert Counter(session.scalars(select(Truck.deliveries))) == {1: succeeded, 0: BURST - succeeded}
        assert session.scalar(select(func.count()).select_from(Performance)) == 0

        # and no two actions of one lane performed at the same time
        assert session.scalar(select(func.count()).select_from(LaneInterval)) == ended.actions - (
            BURST - succeeded
        )
        assert overlaps(session, OVERLAPPING_INTERVALS) == []
        assert overlaps(session, OVERLAPPING_ACTIONS) == []
        peak = session.scalar(text(PEAK_PARALLELISM))

    assert workers.errors()[errors_before:] == []
    report(f"burst of {BURST} ({succeeded} performed)", ended.actions, elapsed, peak)
