"""Given PostgreSQL, Redis, three ``dramatiq`` worker processes and the sweeper as a clock
process, when a thousand orders run their three-level trees while a random worker is killed
with SIGKILL every few seconds and Redis restarts once, losing every message it held, then
every tree ends, each action completed exactly once in its history, no two actions of one
lane performed at once, and no step counter is negative or stranded.

Issue 3's acceptance (DESIGN invariants 1 to 4 under failure). The trees come from
``tests/integration/chaos_workload.py``: shared lanes at three levels, a flaky leaf that
retries, a ``step.wait`` timer, and outbound shipments that this test completes from
outside, as a carrier's webhook would, some of them as failed. What a kill or the Redis
restart loses is sent again by ``stepwise sweep --every 1 --grace 3``, as production's
clock process would.

Restarting Redis disturbs anything else using it; on a shared machine point the test at a
Redis of its own (``STEPWISE_TEST_REDIS``, ``STEPWISE_TEST_REDIS_START``), and at a
PostgreSQL of its own (``STEPWISE_TEST_POSTGRES``).
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from dramatiq.brokers.redis import RedisBroker
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

import engine
from engine import broker, history, status, testing
from engine.models import Action, ActionEvent, Invocation, Performance, Step
from tests.conftest import POSTGRES_ADMIN_URL, unavailable
from tests.integration.chaos_workload import (
    LOST_EVERY,
    PARCELS_PER_ORDER,
    SHIPPED_EVERY,
    ChaosBase,
    ChaosInterval,
    Order,
    Parcel,
)

ROOT = Path(__file__).resolve().parents[2]
REDIS_URL = os.environ.get("STEPWISE_TEST_REDIS", "redis://127.0.0.1:6379/5")
REDIS_CLAIM = "stepwise:integration-run"

ORDERS = 1000
#: Orders invoked but not yet ended, at most: the queue stays shorter than the sweeper's
#: grace, so the sweeper re-sends what was lost rather than what is merely waiting.
IN_FLIGHT = 120
WORKERS = 3
THREADS = 4
#: A random worker is killed every KILL_EVERY seconds, give or take a second.
KILL_EVERY = 3.0
SWEEP_EVERY = 1.0
GRACE_SECONDS = 3.0
DEADLINE_SECONDS = 240.0
READY = "Worker process is ready for action."


# --- services -------------------------------------------------------------------------


def admin() -> psycopg.Connection[tuple[Any, ...]]:
    try:
        return psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as error:
        unavailable(f"PostgreSQL is not reachable at {POSTGRES_ADMIN_URL}: {error}")
        raise


@pytest.fixture(scope="module")
def database_url() -> Iterator[str]:
    """A fresh PostgreSQL database with the engine's tables and the workload's."""
    name = f"stepwise_chaos_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    with admin() as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    url = f"{POSTGRES_ADMIN_URL.rsplit('/', 1)[0]}/{name}"
    sa_engine = engine.configure(url, pool_size=5)
    engine.create_all(sa_engine)
    ChaosBase.metadata.create_all(sa_engine)
    yield url
    sa_engine.dispose()
    with admin() as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def claim(client: redis.Redis, owner: str) -> bool:
    """Take this Redis database for the run, or return False when another run holds it:
    two runs' workers sharing a queue would take each other's messages."""
    return bool(client.set(REDIS_CLAIM, owner, nx=True, ex=int(DEADLINE_SECONDS) * 3))


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    """An empty Redis database of our own: ``STEPWISE_TEST_REDIS``'s, or the next free one."""
    base, _, first = REDIS_URL.rpartition("/")
    if not first.isdigit():
        base, first = REDIS_URL.rstrip("/"), "0"
    owner = f"chaos-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    for number in range(int(first or 0), 16):
        url = f"{base}/{number}"
        client = redis.Redis.from_url(url, socket_connect_timeout=2)
        try:
            claimed = claim(client, owner)
        except redis.RedisError as error:
            client.close()
            unavailable(f"Redis is not reachable at {url}: {error}")
        if claimed:
            for key in client.scan_iter(count=1000):
                if key != REDIS_CLAIM.encode():
                    client.delete(key)
            break
        client.close()
    else:
        pytest.fail(f"every Redis database from {REDIS_URL} to 15 is held by another run")
    yield url
    try:
        client.flushdb()
    finally:
        client.close()


@pytest.fixture(scope="module")
def redis_broker(redis_url: str) -> Iterator[RedisBroker]:
    """This process's messages (``later()``, the completer's next steps) go to Redis too."""
    real = RedisBroker(url=redis_url)  # type: ignore[no-untyped-call]
    broker.use(real)
    yield real
    testing.setup()
    real.close()


def redis_ready(url: str) -> bool:
    client = redis.Redis.from_url(url, socket_connect_timeout=1)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


def wait_for(ready: Callable[[], bool], what: str, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.1)
    pytest.fail(f"timed out after {seconds:.0f} s waiting for {what}")


def run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False, cwd=ROOT)


def stop_redis(url: str) -> None:
    """``SHUTDOWN NOSAVE``: Redis keeps nothing on disk, so every queued message is lost."""
    if shutil.which("redis-cli") is None:
        unavailable("redis-cli is not installed: Redis cannot be restarted")
    run("redis-cli", "-u", url, "shutdown", "nosave")
    wait_for(lambda: not redis_ready(url), "Redis to stop")


def start_redis(url: str) -> None:
    """As this machine's services script does (or ``STEPWISE_TEST_REDIS_START``)."""
    command = os.environ.get("STEPWISE_TEST_REDIS_START")
    done = run("sh", "-c", command) if command else run(str(ROOT / "scripts" / "services"))
    assert done.returncode == 0, f"Redis did not start: {done.stdout}{done.stderr}"
    wait_for(lambda: redis_ready(url), "Redis to start")


# --- processes ------------------------------------------------------------------------


def tail(log: Path, lines: int = 25) -> str:
    if not log.exists():
        return "(no log)"
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def stop_group(process: subprocess.Popen[bytes], seconds: float = 15.0) -> None:
    """SIGTERM (Dramatiq finishes the messages in hand), then SIGKILL to the whole group."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=seconds)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # stragglers of the group, if any
    process.wait(timeout=10)


@dataclass
class Worker:
    """One ``dramatiq engine.jobs tests.integration.chaos_workload -p 1`` process group."""

    slot: int
    log: Path
    env: dict[str, str]
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0
    #: Where the log of the latest start begins.
    offset: int = 0
    #: Exits we did not cause: (return code, the log's last lines).
    exits: list[tuple[int, str]] = field(default_factory=list)

    def start(self) -> None:
        command = [
            sys.executable,
            "-m",
            "dramatiq",
            "engine.jobs",
            "tests.integration.chaos_workload",
            "--processes",
            "1",
            "--threads",
            str(THREADS),
        ]
        self.offset = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as output:
            self.process = subprocess.Popen(
                command,
                cwd=ROOT,
                env=self.env,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.starts += 1

    def ready(self) -> bool:
        """Whether the worker process started last said it is ready for messages."""
        with self.log.open("rb") as log:
            log.seek(self.offset)
            return READY.encode() in log.read()

    def worker_pid(self) -> int | None:
        """The pid of the Dramatiq worker process (the one running jobs), a child of the
        main process; None while it is being forked."""
        assert self.process is not None
        path = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        try:
            children = path.read_text().split()
        except OSError:
            return None
        return int(children[0]) if children else None

    def kill(self) -> str:
        """SIGKILL the worker process in the middle of whatever it does. Dramatiq's main
        process then stops and exits ("Worker with PID … exited unexpectedly"); it is
        restarted at once, as a supervisor would. Returns what was killed."""
        assert self.process is not None
        pid = self.worker_pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            killed = f"worker process {pid}"
        else:
            os.killpg(self.process.pid, signal.SIGKILL)
            killed = f"process group {self.process.pid} (still booting)"
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=5)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.start()
        return killed

    def restart_if_exited(self) -> None:
        assert self.process is not None
        code = self.process.poll()
        if code is not None:
            self.exits.append((code, tail(self.log, 15)))
            self.start()

    def stop(self) -> None:
        if self.process is not None:
            stop_group(self.process)


@dataclass
class Chaos:
    """The worker groups, the sweeper, and what was done to them."""

    workers: list[Worker]
    sweeper: subprocess.Popen[bytes] | None
    sweeper_log: Path
    redis_url: str
    kills: list[str] = field(default_factory=list)
    redis_down_seconds: float | None = None
    completions: Counter[str] = field(default_factory=Counter)

    def check_processes(self) -> None:
        """Restart a worker group that exited without being killed (recorded, and failed
        at the end); fail at once if the sweeper exited."""
        for worker in self.workers:
            worker.restart_if_exited()
        assert self.sweeper is not None
        if self.sweeper.poll() is not None:
            pytest.fail(f"the sweeper exited with {self.sweeper.returncode}:\n{tail(self.sweeper_log)}")

    def diagnosis(self, session: Session) -> str:
        client = redis.Redis.from_url(self.redis_url, socket_connect_timeout=2)
        try:
            queues = {
                key.decode(): client.llen(key) if client.type(key) == b"list" else client.zcard(key)
                for key in client.scan_iter("dramatiq:*")
                if client.type(key) in (b"list", b"zset")
            }
        except redis.RedisError as error:
            queues = {"unknown": str(error)}  # type: ignore[dict-item]
        finally:
            client.close()
        logs = "\n".join(f"--- worker {w.slot} ({w.log}):\n{tail(w.log)}" for w in self.workers)
        return (
            f"{stuck(session)}\nRedis (queues, acks, heartbeats): {queues}\n"
            f"database sessions (pid, state, wait, blocked by, age, query):\n{database_sessions(session)}\n"
            f"kills: {len(self.kills)}; exits we did not cause: "
            f"{[(w.slot, code) for w in self.workers for code, _ in w.exits]}\n"
            f"--- sweeper ({self.sweeper_log}):\n{tail(self.sweeper_log, 10)}\n{logs}"
        )


@pytest.fixture
def chaos(
    database_url: str, redis_url: str, redis_broker: RedisBroker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Chaos]:
    """Three worker groups and the sweeper, all stopped at the end whatever happened; Redis
    is left running."""
    logs = tmp_path_factory.mktemp("chaos")
    env = {**os.environ, "DATABASE_URL": database_url, "REDIS_URL": redis_url, "PYTHONUNBUFFERED": "1"}
    running = Chaos(
        [Worker(n, logs / f"worker-{n}.log", env) for n in range(WORKERS)],
        None,
        logs / "sweeper.log",
        redis_url,
    )
    try:
        for worker in running.workers:
            worker.start()
        with running.sweeper_log.open("wb") as output:
            running.sweeper = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "engine.cli",
                    "sweep",
                    "--every",
                    str(SWEEP_EVERY),
                    "--grace",
                    str(GRACE_SECONDS),
                ],
                cwd=ROOT,
                env=env,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_for(lambda: all(w.ready() for w in running.workers), "the workers to be ready")
        yield running
    finally:
        for worker in running.workers:
            worker.stop()
        if running.sweeper is not None:
            stop_group(running.sweeper, seconds=5)
        if not redis_ready(redis_url):
            start_redis(redis_url)
        print(f"\nchaos logs: {logs}")


# --- the workload ---------------------------------------------------------------------


def given_orders(count: int) -> list[int]:
    with engine.new_session() as session:
        orders = [
            Order(
                number=n,
                parcels=[
                    Parcel(number=p, outbound=p % SHIPPED_EVERY == 0)
                    for p in range(n * PARCELS_PER_ORDER, (n + 1) * PARCELS_PER_ORDER)
                ],
            )
            for n in range(count)
        ]
        session.add_all(orders)
        session.commit()
        return [order.id for order in orders]


def fulfil(order_ids: list[int]) -> None:
    """Invoke the orders in one transaction; their admissions go to Redis after commit
    (or, if Redis is down, are lost and left to the sweeper)."""
    with engine.new_session() as session:
        for order in session.scalars(select(Order).where(Order.id.in_(order_ids)).order_by(Order.id)):
            engine.later(order, "fulfil", order.number)
        session.commit()


def roots_ended(session: Session) -> int:
    return (
        session.scalar(select(func.count()).where(Action.root.is_(True), Action.status.in_(status.TERMINAL)))
        or 0
    )


def complete_shipments(chaos: Chaos, parcel_numbers: dict[str, int], limit: int = 60) -> None:
    """The carrier's webhook: complete the shipments awaiting completion (their step has
    concluded), every LOST_EVERY-th parcel's as failed."""
    with engine.new_session() as session:
        awaiting = session.execute(
            select(Action.id, Action.actor_id)
            .join(
                Step,
                (Step.action_id == Action.id) & (Step.definition_index == Action.current_step_index),
            )
            .where(Action.name == "ship", Action.status == status.PERFORMING, Step.completed_at.is_not(None))
            .order_by(Action.id)
            .limit(limit)
        ).all()
    for action_id, parcel_id in awaiting:
        to = status.FAILED if parcel_numbers[parcel_id] % LOST_EVERY == 0 else status.SUCCEEDED
        done = engine.complete_action(action_id, to, cause=history.WEBHOOK, by="chaos completer")
        chaos.completions[to if done else done.reason] += 1


@dataclass
class Progress:
    fed: int
    actions: int
    unfinished: int
    unsettled: int
    roots_ended: int

    def settled(self) -> bool:
        return (
            self.fed == ORDERS and self.roots_ended == ORDERS and not self.unfinished and not self.unsettled
        )


def progress(session: Session, fed: int) -> Progress:
    return Progress(
        fed=fed,
        actions=session.scalar(select(func.count()).select_from(Action)) or 0,
        unfinished=session.scalar(select(func.count()).where(Action.status.in_(status.INCOMPLETE))) or 0,
        # Requested but not admitted, or a child whose parent step was not told it ended.
        unsettled=session.scalar(
            select(func.count()).where(
                Invocation.settled_at.is_(None)
                | (Invocation.parent_step_id.is_not(None) & Invocation.concluded_at.is_(None))
            )
        )
        or 0,
        roots_ended=roots_ended(session),
    )


def stuck(session: Session, limit: int = 12) -> str:
    """What is left unfinished, row by row: each action with its lane, steps and last
    events; each unsettled invocation with its last events."""
    lines = [f"statuses: {dict(Counter(session.scalars(select(Action.status))))}"]
    unfinished = session.scalars(
        select(Action).where(Action.status.in_(status.INCOMPLETE)).order_by(Action.id).limit(limit)
    ).all()
    for action in unfinished:
        lane = session.scalars(
            select(Performance).where(Performance.concurrency_key == action.concurrency_key)
        )
        lines.append(
            f"- {action!r} lane={action.concurrency_key!r} (current: {[p.action_id for p in lane]}) "
            f"step #{action.current_step_index} started={action.started_at} tree={action.tree_id}"
        )
        for step in session.scalars(select(Step).where(Step.action_id == action.id).order_by(Step.id)):
            lines.append(
                f"    {step!r} attempt={step.attempt} performed={step.performed_at} retry_at={step.retry_at} "
                f"completed={step.completed_at}"
            )
        lines += [
            f"    {event.at:%H:%M:%S.%f} {event.event} {event.cause} {event.data}"
            for event in events(session, action_id=action.id)
        ]
    unsettled = session.scalars(
        select(Invocation)
        .where(
            Invocation.settled_at.is_(None)
            | (Invocation.parent_step_id.is_not(None) & Invocation.concluded_at.is_(None))
        )
        .order_by(Invocation.id)
        .limit(limit)
    ).all()
    for invocation in unsettled:
        lines.append(
            f"- {invocation!r} created={invocation.created_at} settled={invocation.settled_at} "
            f"concluded={invocation.concluded_at} parent step={invocation.parent_step_id} "
            f"action={invocation.action_id}"
        )
        lines += [
            f"    {event.at:%H:%M:%S.%f} {event.event} {event.cause} {event.data}"
            for event in events(session, invocation_id=invocation.id)
        ] or ["    (no event: neither admitted nor sent again)"]
    return "\n".join(lines)


def events(session: Session, last: int = 6, **where: int) -> list[ActionEvent]:
    column = ActionEvent.action_id if "action_id" in where else ActionEvent.invocation_id
    rows = session.scalars(
        select(ActionEvent)
        .where(column == next(iter(where.values())))
        .order_by(ActionEvent.id.desc())
        .limit(last)
    ).all()
    return list(reversed(rows))


def database_sessions(session: Session) -> str:
    rows = session.execute(
        text(
            "SELECT pid, state, wait_event_type || ':' || wait_event, pg_blocking_pids(pid), "
            "now() - xact_start, left(query, 160) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() ORDER BY pid"
        )
    ).all()
    return "\n".join(str(tuple(row)) for row in rows)


def run_the_chaos(chaos: Chaos, order_ids: list[int]) -> float:
    """Feed the orders (at most IN_FLIGHT unfinished), complete the shipments, kill a
    random worker every few seconds and restart Redis once, halfway, until every tree has
    ended. Returns the seconds it took; fails with a diagnosis at the deadline."""
    with engine.new_session() as session:
        rows = session.execute(select(Parcel.id, Parcel.number))
        parcel_numbers = {str(parcel_id): number for parcel_id, number in rows}
    rng = random.Random()
    started = time.monotonic()
    next_kill = started + rng.uniform(KILL_EVERY - 1, KILL_EVERY + 1)
    fed = 0
    with engine.new_session() as session:
        while True:
            now = time.monotonic()
            current = progress(session, fed)
            session.rollback()
            if current.settled():
                return now - started
            if now - started > DEADLINE_SECONDS:
                pytest.fail(
                    f"not every tree ended in {DEADLINE_SECONDS:.0f} s: {current}\n{chaos.diagnosis(session)}"
                )
            if fed < ORDERS and fed - current.roots_ended < IN_FLIGHT:
                batch = order_ids[fed : fed + min(IN_FLIGHT - (fed - current.roots_ended), 40)]
                fulfil(batch)
                fed += len(batch)
            if chaos.redis_down_seconds is None and fed >= ORDERS // 2:
                fed += restart_redis(chaos, order_ids[fed : fed + 10])
            if now >= next_kill:
                chaos.kills.append(rng.choice(chaos.workers).kill())
                next_kill = now + rng.uniform(KILL_EVERY - 1, KILL_EVERY + 1)
            chaos.check_processes()
            complete_shipments(chaos, parcel_numbers)
            time.sleep(0.1)


def restart_redis(chaos: Chaos, order_ids: list[int]) -> int:
    """Stop Redis, losing every message it held, fulfil ``order_ids`` while it is down
    (their admissions cannot be sent), and start it again. Returns how many were fed."""
    # Every worker connected first: one still booting would exit on the refused connection
    # (Dramatiq's exit status 3), which is not what this tests.
    wait_for(lambda: all(w.ready() for w in chaos.workers), "the workers to be ready")
    down = time.monotonic()
    stop_redis(chaos.redis_url)
    fulfil(order_ids)
    start_redis(chaos.redis_url)
    chaos.redis_down_seconds = time.monotonic() - down
    with redis.Redis.from_url(chaos.redis_url) as client:
        claim(client, "chaos (after the restart)")
    return len(order_ids)


# --- what is checked afterwards -------------------------------------------------------

OVERLAPPING_INTERVALS = """
SELECT a.concurrency_key, a.action_id, a.started_at, a.ended_at, b.action_id, b.started_at, b.ended_at
FROM chaos_lane_intervals a
JOIN chaos_lane_intervals b
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

#: Per action: its status, whether it started, and how often its history says it started
#: and completed.
EVENTS_PER_ACTION = """
SELECT a.id, a.name, a.status, a.started_at IS NOT NULL,
       count(e.id) FILTER (WHERE e.event = 'started'),
       count(e.id) FILTER (WHERE e.event = 'completed')
FROM stepwise_actions a LEFT JOIN stepwise_action_events e ON e.action_id = a.id
GROUP BY a.id
"""

PEAK_PARALLELISM = """
SELECT max(running) FROM (
  SELECT sum(change) OVER (ORDER BY at, change) AS running FROM (
    SELECT started_at AS at, 1 AS change FROM chaos_lane_intervals
    UNION ALL SELECT ended_at, -1 FROM chaos_lane_intervals
  ) edges
) timeline
"""


def report(chaos: Chaos, seconds: float, session: Session) -> None:
    statuses = Counter(session.scalars(select(Action.status)))
    recovered = Counter(
        event.data["job"]
        for event in session.scalars(select(ActionEvent).where(ActionEvent.event == "recovered"))
    )
    retried = session.scalar(select(func.count()).where(ActionEvent.event == "attempt_failed"))
    peak = session.scalar(text(PEAK_PARALLELISM))
    print(
        f"\nchaos: {ORDERS} trees, {sum(statuses.values())} actions ({dict(statuses)}) "
        f"ended in {seconds:.1f} s on {WORKERS} workers x {THREADS} threads "
        f"(at most {peak} performing at once, counting those waiting on children)\n"
        f"  {len(chaos.kills)} workers killed with SIGKILL, {sum(w.starts for w in chaos.workers) - WORKERS} "
        f"restarts; Redis down {chaos.redis_down_seconds or 0:.1f} s\n"
        f"  the sweeper sent {sum(recovered.values())} messages again: {dict(recovered)}\n"
        f"  the completer completed {dict(chaos.completions)} shipments; {retried} label attempts failed "
        f"and were retried"
    )


# --- the test -------------------------------------------------------------------------


@pytest.mark.timeout(DEADLINE_SECONDS + 180)
def test_every_tree_ends_whole_while_workers_are_killed_and_redis_restarts(chaos: Chaos) -> None:
    # Given a thousand orders of two parcels each, every third parcel shipped
    order_ids = given_orders(ORDERS)

    # When they are fulfilled by three workers, one killed with SIGKILL every few seconds,
    # with Redis restarted once, shipments completed from outside and the sweeper running
    seconds = run_the_chaos(chaos, order_ids)

    with engine.new_session() as session:
        report(chaos, seconds, session)

        # Then every tree ended: every root succeeded or failed, every action is terminal,
        # and no lane is left
        roots = Counter(session.scalars(select(Action.status).where(Action.root.is_(True))))
        assert sum(roots.values()) == ORDERS
        assert set(roots) <= {status.SUCCEEDED, status.FAILED}
        assert session.scalar(select(func.count()).where(Action.status.in_(status.INCOMPLETE))) == 0
        assert session.scalar(select(func.count()).select_from(Performance)) == 0

        # and the trees were three levels deep, with leaves in shared lanes
        names = Counter(session.scalars(select(Action.name)))
        assert names["fulfil"] == ORDERS
        assert names["pack"] == ORDERS * PARCELS_PER_ORDER
        assert names["label"] == ORDERS * PARCELS_PER_ORDER
        assert names["ship"] == len(range(0, ORDERS * PARCELS_PER_ORDER, SHIPPED_EVERY))

        # and each action's completion appears in its history exactly once (never for a
        # superseded one, which never started), as does its start
        wrong = [
            row
            for row in session.execute(text(EVENTS_PER_ACTION))
            if row[5] != (0 if row[2] == status.SUPERSEDED else 1) or row[4] != (1 if row[3] else 0)
        ]
        assert wrong[:20] == [], "(id, name, status, started, 'started' events, 'completed' events)"
        assert (
            session.scalar(
                select(func.count()).where(Action.status == status.SUPERSEDED, Action.started_at.is_not(None))
            )
            == 0
        )

        # and no two actions of one lane performed at once: in the intervals the actions
        # recorded and in the engine's own timestamps
        performed = session.scalar(select(func.count()).where(Action.started_at.is_not(None))) or 0
        assert session.scalar(select(func.count()).select_from(ChaosInterval)) == performed
        assert session.scalar(select(func.count()).where(ChaosInterval.ended_at.is_(None))) == 0
        assert list(session.execute(text(OVERLAPPING_INTERVALS))) == []
        assert list(session.execute(text(OVERLAPPING_ACTIONS))) == []

        # and no step counter is negative or stranded: every step ran and concluded
        steps = Counter(
            tuple(row)
            for row in session.execute(
                select(
                    Step.status,
                    Step.pending_actions_count,
                    Step.performed_at.is_not(None),
                    Step.completed_at.is_not(None),
                )
            )
        )
        assert set(steps) <= {(status.STEP_SUCCEEDED, 0, True, True), (status.STEP_FAILED, 0, True, True)}
        stepless = select(Step.id).where(Step.action_id == Action.id).exists()
        assert session.scalar(select(func.count()).where(Action.started_at.is_not(None), ~stepless)) == 0

        # and every invocation was settled, and every child told its parent step that it ended
        assert session.scalar(select(func.count()).where(Invocation.settled_at.is_(None))) == 0
        assert (
            session.scalar(
                select(func.count()).where(
                    Invocation.parent_step_id.is_not(None), Invocation.concluded_at.is_(None)
                )
            )
            == 0
        )

        # and no step body's work was committed twice
        assert session.scalar(select(func.max(Order.closings))) == 1
        for column in (Parcel.sealed, Parcel.labelled, Parcel.handed_over):
            assert session.scalar(select(func.max(column))) == 1

        # and the chaos happened: workers were killed, Redis restarted, the sweeper
        # recovered lost work, flaky labels were retried, timers elapsed, shipments failed
        # and succeeded
        assert len(chaos.kills) >= 5
        assert chaos.redis_down_seconds is not None
        assert (session.scalar(select(func.count()).where(ActionEvent.event == "recovered")) or 0) > 0
        assert (session.scalar(select(func.count()).where(ActionEvent.event == "attempt_failed")) or 0) > 0
        assert (session.scalar(select(func.count()).where(Invocation.outcome == "waited")) or 0) > 0
        assert chaos.completions[status.SUCCEEDED] > 0 and chaos.completions[status.FAILED] > 0

    # and no worker group exited unless it was killed
    assert [(w.slot, code, log) for w in chaos.workers for code, log in w.exits] == []
