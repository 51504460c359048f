"""What every benchmark script needs around a run: the services, from the environment, and
a fresh PostgreSQL database and an empty Redis database (or a fresh RabbitMQ virtual host)
for this run (with the helpers that read them), the progress line on stderr and the
machine's description.

Services come from the environment: ``STEPWISE_BENCH_POSTGRES`` (an administrative URL,
default ``STEPWISE_TEST_POSTGRES`` or ``postgresql://127.0.0.1:5432/postgres``),
``STEPWISE_BENCH_REDIS`` (default ``redis://127.0.0.1:6379/15``: that database, or the next
lower one that no other run holds) and ``STEPWISE_BENCH_RABBITMQ`` (default
``amqp://guest:guest@127.0.0.1:5672/``; the run's virtual host replaces its own, made and
deleted with the local ``rabbitmqctl``).

Elsewhere: ``bench/processes.py`` (CPU and memory from ``/proc``, the worker processes) and
``bench/figures.py`` (the SQL counts, percentiles and the figure table).
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
import redis

ROOT = Path(__file__).resolve().parents[1]
POSTGRES_ADMIN_URL = os.environ.get(
    "STEPWISE_BENCH_POSTGRES",
    os.environ.get("STEPWISE_TEST_POSTGRES", "postgresql://127.0.0.1:5432/postgres"),
)
REDIS_URL = os.environ.get("STEPWISE_BENCH_REDIS", "redis://127.0.0.1:6379/15")
RABBITMQ_URL = os.environ.get("STEPWISE_BENCH_RABBITMQ", "amqp://guest:guest@127.0.0.1:5672/")
#: The key the integration tests use to hold a Redis database for one run: honoured here
#: too, so a benchmark and a test run never share a queue.
REDIS_CLAIM = "stepwise:integration-run"


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def machine() -> str:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
    return (
        f"{os.cpu_count()} CPUs ({cpu or platform.processor()}), Python {platform.python_version()}, "
        f"load average {' '.join(load)}"
    )


# --- PostgreSQL -----------------------------------------------------------------------


def url_of(name: str) -> str:
    return f"{POSTGRES_ADMIN_URL.rsplit('/', 1)[0]}/{name}"


@contextmanager
def fresh_database(prefix: str, keep: bool = False) -> Iterator[str]:
    """A new, empty PostgreSQL database for this run (dropped at the end unless ``keep``)."""
    name = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True, connect_timeout=5) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    say(f"database {name}")
    try:
        yield url_of(name)
    finally:
        if keep:
            say(f'kept database {name}: DROP DATABASE "{name}" WITH (FORCE) when done')
        else:
            with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True, connect_timeout=5) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def create_schema(url: str) -> None:
    """The engine's tables and the workload's, from a short-lived connection."""
    import engine
    from bench.workload import BenchBase

    sa_engine = engine.configure(url, pool_size=5)
    engine.create_all(sa_engine)
    BenchBase.metadata.create_all(sa_engine)


def database_name(url: str) -> str:
    return url.rsplit("/", 1)[1].split("?", 1)[0]


def max_id(connection: psycopg.Connection[Any], table: str) -> int:
    """The largest id in ``table`` (0 when it is empty)."""
    row = connection.execute(f"SELECT coalesce(max(id), 0) FROM {table}").fetchone()
    return int(row[0]) if row else 0


# --- Redis ----------------------------------------------------------------------------


@contextmanager
def claimed_redis() -> Iterator[str]:
    """An empty Redis database held for this run (the integration tests' claim key), flushed
    at the end."""
    base, _, first = REDIS_URL.rpartition("/")
    if not first.isdigit():
        base, first = REDIS_URL.rstrip("/"), "15"
    owner = f"bench-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    for number in range(int(first), -1, -1):
        url = f"{base}/{number}"
        client = redis.Redis.from_url(url, socket_connect_timeout=2)
        if client.set(REDIS_CLAIM, owner, nx=True, ex=3 * 3600):
            break
        client.close()
    else:
        raise SystemExit(f"every Redis database from {REDIS_URL} down to 0 is held by another run")
    for key in client.scan_iter(count=1000):
        if key != REDIS_CLAIM.encode():
            client.delete(key)
    say(f"redis {url}")
    try:
        yield url
    finally:
        client.flushdb()
        client.close()


def use_redis_broker(url: str) -> Any:
    """This process sends the engine's messages (and the raw baseline's) to Redis."""
    from engine import broker
    from engine.redis_doorbell import DoorbellRedisBroker

    return broker.use(DoorbellRedisBroker(url=url))


# --- RabbitMQ -------------------------------------------------------------------------

#: A run's virtual host: ``stepwise_bench_<pid>_<hex>``; one whose process is gone was left
#: by a run that died, and the next run deletes it.
VHOST = re.compile(r"^stepwise_bench_(\d+)_[0-9a-f]{6}$")


def rabbitmqctl(*arguments: str) -> str:
    try:
        done = subprocess.run(
            ["rabbitmqctl", "-q", *arguments], capture_output=True, text=True, timeout=60, check=True
        )
    except (OSError, subprocess.SubprocessError) as error:
        raise SystemExit(f"rabbitmqctl {' '.join(arguments)} failed: {error}") from None
    return done.stdout


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass
    return False


@contextmanager
def fresh_vhost() -> Iterator[str]:
    """A new RabbitMQ virtual host for this run on ``STEPWISE_BENCH_RABBITMQ``'s server, its
    user allowed everything there (the URL of it is yielded); deleted at the end, with its
    queues."""
    for name in rabbitmqctl("list_vhosts", "--no-table-headers").split():
        match = VHOST.match(name)
        if match and _gone(int(match.group(1))):
            rabbitmqctl("delete_vhost", name)
    vhost = f"stepwise_bench_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    rabbitmqctl("add_vhost", vhost)
    try:
        rabbitmqctl(
            "set_permissions", "-p", vhost, urlsplit(RABBITMQ_URL).username or "guest", ".*", ".*", ".*"
        )
        url = urlunsplit(urlsplit(RABBITMQ_URL)._replace(path="/" + quote(vhost, safe="")))
        say(f"rabbitmq {url}")
        yield url
    finally:
        rabbitmqctl("delete_vhost", vhost)


def use_rabbitmq_broker(url: str) -> Any:
    """This process sends the engine's messages to RabbitMQ."""
    from dramatiq.brokers.rabbitmq import RabbitmqBroker

    from engine import broker

    return broker.use(RabbitmqBroker(url=url))
