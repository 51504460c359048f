"""The integration tests' harness: a fresh PostgreSQL database, a Redis database of their own
(stopped and started again by the tests of restarts), and ``dramatiq`` worker process groups.
``conftest.py`` registers its fixtures for every integration test; ``progress.py`` waits for
the work and says why it stopped.

Restarting a service disturbs anything else using it; on a shared machine point the tests
at services of their own: ``STEPWISE_TEST_POSTGRES`` and ``STEPWISE_TEST_REDIS`` (URLs),
``STEPWISE_TEST_REDIS_START`` (a shell command; the default is ``scripts/services``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from dramatiq.brokers.redis import RedisBroker
from sqlalchemy import MetaData

import engine
from engine import broker, testing
from tests.conftest import POSTGRES_ADMIN_URL, unavailable

ROOT = Path(__file__).resolve().parents[2]
REDIS_URL = os.environ.get("STEPWISE_TEST_REDIS", "redis://127.0.0.1:6379/5")
#: The key that holds a Redis database for one run (``bench/common.py`` honours it too).
REDIS_CLAIM = "stepwise:integration-run"
#: How long a claim lasts if a run dies without releasing it: longer than any module's run.
CLAIM_SECONDS = 720
READY = "Worker process is ready for action."


# --- PostgreSQL -----------------------------------------------------------------------


def admin() -> psycopg.Connection[tuple[Any, ...]]:
    """A connection to the administrative database, opened only when needed: restarting
    PostgreSQL closes every open connection."""
    try:
        return psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as error:
        unavailable(f"PostgreSQL is not reachable at {POSTGRES_ADMIN_URL}: {error}")
        raise


def postgres_ready() -> bool:
    try:
        psycopg.connect(POSTGRES_ADMIN_URL, connect_timeout=1).close()
        return True
    except psycopg.OperationalError:
        return False


@contextlib.contextmanager
def fresh_database(prefix: str, workload: MetaData) -> Iterator[str]:
    """A new PostgreSQL database with the engine's tables and the workload's, the engine
    configured for it; dropped at the end."""
    name = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    with admin() as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    url = f"{POSTGRES_ADMIN_URL.rsplit('/', 1)[0]}/{name}"
    sa_engine = engine.configure(url, pool_size=5)
    try:
        engine.create_all(sa_engine)
        workload.create_all(sa_engine)
        yield url
    finally:
        sa_engine.dispose()
        wait_for(postgres_ready, "PostgreSQL to accept connections")
        with admin() as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# --- Redis ----------------------------------------------------------------------------


def claim(client: redis.Redis, owner: str) -> bool:
    """Take this Redis database for one run, or return False when another run holds it:
    two runs' workers sharing a queue would take each other's messages and look their ids
    up in the wrong PostgreSQL database."""
    return bool(client.set(REDIS_CLAIM, owner, nx=True, ex=CLAIM_SECONDS))


@pytest.fixture(scope="module")
def redis_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """An empty Redis database of our own: ``STEPWISE_TEST_REDIS``'s, or the next free one."""
    base, _, first = REDIS_URL.rpartition("/")
    if not first.isdigit():
        base, first = REDIS_URL.rstrip("/"), "0"
    owner = f"{request.module.__name__.rsplit('.', 1)[-1]}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
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
    """This process's messages (``later()``, a completion's next step) go to Redis too."""
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


def wait_for(ready: Callable[[], bool], what: str, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.1)
    pytest.fail(f"timed out after {seconds:.0f} s waiting for {what}")


# --- worker processes -----------------------------------------------------------------


def worker_env(database_url: str, redis_url: str) -> dict[str, str]:
    return {**os.environ, "DATABASE_URL": database_url, "REDIS_URL": redis_url, "PYTHONUNBUFFERED": "1"}


def tail(log: Path, lines: int = 25) -> str:
    if not log.exists():
        return "(no log)"
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def stop_group(process: subprocess.Popen[bytes], seconds: float = 20.0) -> None:
    """SIGTERM (Dramatiq finishes the messages in hand), then SIGKILL to the whole group."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=seconds)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # stragglers of the group, if any
    process.wait(timeout=10)


@dataclass
class WorkerGroup:
    """One ``dramatiq engine.jobs <workload>`` process group; each start appends to its log."""

    workload: str
    log: Path
    env: dict[str, str]
    processes: int = 1
    threads: int = 4
    options: tuple[str, ...] = ()
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0
    #: Where the log of the latest start begins.
    offset: int = 0

    @property
    def redis_url(self) -> str:
        return self.env["REDIS_URL"]

    def start(self) -> None:
        command = [sys.executable, "-m", "dramatiq", "engine.jobs", self.workload]
        command += ["--processes", str(self.processes), "--threads", str(self.threads), *self.options]
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

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def ready(self) -> bool:
        """Whether every worker process of the latest start said it is ready for messages."""
        with self.log.open("rb") as log:
            log.seek(self.offset)
            return log.read().count(READY.encode()) >= self.processes

    def tail(self, lines: int = 25) -> str:
        return tail(self.log, lines)

    def errors(self) -> list[str]:
        """The log's errors, warnings (Dramatiq's retries) and tracebacks."""
        text = self.log.read_text(errors="replace").splitlines()
        return [line for line in text if "ERROR" in line or "Traceback" in line or "WARNING" in line]

    def stop(self, seconds: float = 20.0) -> None:
        if self.process is not None:
            stop_group(self.process, seconds)


def wait_until_ready(groups: Sequence[WorkerGroup], seconds: float = 30.0) -> None:
    """Until every group's worker processes are ready; fails at once if a group exits."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for group in groups:
            if not group.running():
                code = group.process.returncode if group.process else None
                pytest.fail(f"the workers of {group.log} exited with {code}:\n{group.tail(60)}")
        if all(group.ready() for group in groups):
            return
        time.sleep(0.1)
    logs = "\n".join(f"--- {group.log}:\n{group.tail(60)}" for group in groups)
    pytest.fail(f"the workers were not ready after {seconds:.0f} s:\n{logs}")
