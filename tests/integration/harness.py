"""The integration tests' harness: a fresh PostgreSQL database and ``dramatiq`` worker
process groups; ``brokers.py`` gives each run a broker of its own, on Redis and on RabbitMQ.
``conftest.py`` registers their fixtures for every integration test; ``progress.py`` waits for
the work and says why it stopped.

Restarting a service disturbs anything else using it; on a shared machine point the tests
at services of their own: ``STEPWISE_TEST_POSTGRES`` (a URL), and the brokers' variables
that ``brokers.py`` names.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from sqlalchemy import MetaData

import engine
from tests.conftest import POSTGRES_ADMIN_URL, unavailable

if TYPE_CHECKING:
    from tests.integration.brokers import BrokerServer

ROOT = Path(__file__).resolve().parents[2]
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


# --- services -------------------------------------------------------------------------


def run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False, cwd=ROOT)


def wait_for(ready: Callable[[], bool], what: str, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.1)
    pytest.fail(f"timed out after {seconds:.0f} s waiting for {what}")


# --- worker processes -----------------------------------------------------------------


def worker_env(database_url: str, server: BrokerServer) -> dict[str, str]:
    """This environment with the run's database and broker, and no other broker's URL
    (``engine.broker.from_environment`` prefers ``REDIS_URL``). A killed worker's claims
    lapse after 5 s (engine/claiming.py), so that its steps are sent again within a
    test's time; the workers' keepers extend the claims of their bodies that run longer."""
    env = {name: value for name, value in os.environ.items() if name not in ("REDIS_URL", "RABBITMQ_URL")}
    env.setdefault("STEPWISE_LEASE_SECONDS", "5")
    return {**env, "DATABASE_URL": database_url, server.variable: server.url, "PYTHONUNBUFFERED": "1"}


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
    server: BrokerServer
    processes: int = 1
    threads: int = 4
    options: tuple[str, ...] = ()
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0
    #: Where the log of the latest start begins.
    offset: int = 0

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


@contextlib.contextmanager
def running(group: WorkerGroup) -> Iterator[WorkerGroup]:
    """``group`` started and ready, stopped at the end (its log's path printed)."""
    try:
        group.start()
        wait_until_ready([group])
        yield group
    finally:
        group.stop()
        print(f"\nworker log: {group.log}")


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
