"""The brokers the integration tests run on, Redis and RabbitMQ: each module's run gets a
broker of its own on the machine's server (a Redis database it claims, a RabbitMQ virtual
host it creates), and the tests of restarts stop and start the server itself.

Every integration test runs once per broker of ``STEPWISE_TEST_BROKERS`` (default
``redis,rabbitmq``). Under CI=true a broker that is not reachable fails the run.

Restarting a server disturbs anything else using it; on a shared machine point the tests at
servers of their own: ``STEPWISE_TEST_REDIS`` and ``STEPWISE_TEST_RABBITMQ`` (URLs; the
RabbitMQ one's virtual host is replaced by the run's own), ``STEPWISE_TEST_REDIS_START`` and
``STEPWISE_TEST_RABBITMQ_START`` (shell commands; the default is ``scripts/services``).
RabbitMQ's virtual hosts are made and its node stopped with the local ``rabbitmqctl``.
"""

from __future__ import annotations

import abc
import contextlib
import logging
import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterator
from typing import Any, ClassVar
from urllib.parse import quote, urlsplit, urlunsplit

import dramatiq
import pika
import pika.exceptions
import pytest
import redis

from engine import broker, testing
from tests.conftest import unavailable
from tests.integration.harness import ROOT, run, wait_for

BROKERS = os.environ.get("STEPWISE_TEST_BROKERS", "redis,rabbitmq").split(",")
REDIS_URL = os.environ.get("STEPWISE_TEST_REDIS", "redis://127.0.0.1:6379/5")
RABBITMQ_URL = os.environ.get("STEPWISE_TEST_RABBITMQ", "amqp://guest:guest@127.0.0.1:5672/")
#: The key that holds a Redis database for one run (``bench/common.py`` honours it too).
REDIS_CLAIM = "stepwise:integration-run"
#: How long a claim lasts if a run dies without releasing it: longer than any module's run.
CLAIM_SECONDS = 720
#: A run's RabbitMQ virtual host is ``stepwise_test_<pid>_<hex>``: one whose process is gone
#: was left by a run that died, and the next run deletes it.
VHOST = re.compile(r"^stepwise_test_(\d+)_[0-9a-f]{6}$")

# pika logs every refused connection at ERROR with a traceback; while RabbitMQ restarts, the
# readiness probes below expect refusals (Dramatiq's broker says what it retries).
logging.getLogger("pika").setLevel(logging.CRITICAL)


class BrokerServer(abc.ABC):
    """One run's broker, shared by this process and its worker processes."""

    #: As the tests' messages say it.
    name: ClassVar[str]
    #: As ``STEPWISE_TEST_BROKERS`` and the tests' ids say it.
    key: ClassVar[str]
    #: The environment variable ``engine.broker.from_environment`` reads it from.
    variable: ClassVar[str]
    #: The command that starts the server again unless this variable names another.
    start_variable: ClassVar[str]
    #: Whether the messages it held survive a restart: RabbitMQ keeps its durable queues'
    #: persistent messages (and requeues those delivered but not acknowledged); Redis, run
    #: without persistence here, loses them all.
    keeps_messages: ClassVar[bool]
    #: The longest an idle consumer may take to see a new message: Redis is polled (Dramatiq
    #: backs off up to its worker timeout, 1 s); RabbitMQ pushes.
    poll_seconds: ClassVar[float]

    def __init__(self, url: str) -> None:
        self.url = url

    def __repr__(self) -> str:
        return f"{self.name} {self.url}"

    @abc.abstractmethod
    def client(self) -> dramatiq.Broker:
        """A Dramatiq broker for this process."""

    @abc.abstractmethod
    def ready(self) -> bool:
        """Whether the server accepts this run's connections."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Stop the whole server, closing every connection to it."""

    def start(self) -> None:
        """As this machine's services script does (or the ``start_variable``'s command)."""
        command = os.environ.get(self.start_variable)
        done = run("sh", "-c", command) if command else run(str(ROOT / "scripts" / "services"))
        assert done.returncode == 0, f"{self.name} did not start: {done.stdout}{done.stderr}"
        wait_for(self.ready, f"{self.name} to start", seconds=60)

    @abc.abstractmethod
    def state(self, worker_processes: int) -> str:
        """What the broker holds, for a diagnosis."""


# --- Redis ----------------------------------------------------------------------------


class RedisServer(BrokerServer):
    """A Redis database claimed for one run: two runs' workers sharing a queue would take
    each other's messages and look their ids up in the wrong PostgreSQL database."""

    name = "Redis"
    key = "redis"
    variable = "REDIS_URL"
    start_variable = "STEPWISE_TEST_REDIS_START"
    keeps_messages = False
    poll_seconds = 1.0

    def __init__(self, url: str, owner: str) -> None:
        super().__init__(url)
        self.owner = owner

    def connect(self, seconds: float = 2.0) -> redis.Redis:
        return redis.Redis.from_url(self.url, socket_connect_timeout=seconds)

    def claim(self) -> bool:
        """Take this database for the run, or return False when another run holds it."""
        with self.connect() as client:
            return bool(client.set(REDIS_CLAIM, self.owner, nx=True, ex=CLAIM_SECONDS))

    def client(self) -> dramatiq.Broker:
        from engine.redis_doorbell import DoorbellRedisBroker

        return DoorbellRedisBroker(url=self.url)

    def ready(self) -> bool:
        with self.connect(1.0) as client:
            try:
                return bool(client.ping())
            except redis.RedisError:
                return False

    def stop(self) -> None:
        """``SHUTDOWN NOSAVE``: Redis keeps nothing on disk, so every queued message is lost."""
        if shutil.which("redis-cli") is None:
            unavailable("redis-cli is not installed: Redis cannot be restarted")
        run("redis-cli", "-u", self.url, "shutdown", "nosave")
        wait_for(lambda: not self.ready(), "Redis to stop")

    def start(self) -> None:
        super().start()
        self.claim()  # the restart lost the claim with everything else

    def state(self, worker_processes: int) -> str:
        """The sizes of Dramatiq's queues, acks and heartbeats. The heartbeats count every
        broker that talked to this database recently: this process's, one per worker process,
        and those of killed ones until they expire. More means another run is taking our
        messages."""
        try:
            with self.connect() as client:
                kinds = {key: client.type(key) for key in client.scan_iter("dramatiq:*")}
                sizes = {
                    key.decode(): client.llen(key) if kind == b"list" else client.zcard(key)
                    for key, kind in kinds.items()
                    if kind in (b"list", b"zset")
                }
        except redis.RedisError as error:
            return f"Redis {self.url}: unknown ({error})"
        return f"Redis {self.url} ({worker_processes} worker processes): {sizes}"


@contextlib.contextmanager
def redis_server(owner: str) -> Iterator[RedisServer]:
    """An empty Redis database of our own: ``STEPWISE_TEST_REDIS``'s, or the next free one;
    flushed at the end."""
    base, _, first = REDIS_URL.rpartition("/")
    if not first.isdigit():
        base, first = REDIS_URL.rstrip("/"), "0"
    for number in range(int(first or 0), 16):
        server = RedisServer(f"{base}/{number}", owner)
        try:
            if server.claim():
                break
        except redis.RedisError as error:
            unavailable(f"Redis is not reachable at {server.url}: {error}")
    else:
        pytest.fail(f"every Redis database from {REDIS_URL} to 15 is held by another run")
    with server.connect() as client:
        for key in client.scan_iter(count=1000):
            if key != REDIS_CLAIM.encode():
                client.delete(key)
    try:
        yield server
    finally:
        with server.connect() as client:
            client.flushdb()


# --- RabbitMQ -------------------------------------------------------------------------


def rabbitmqctl(*arguments: str) -> str:
    if shutil.which("rabbitmqctl") is None:
        unavailable("rabbitmqctl is not installed: no RabbitMQ virtual host can be made")
    done = run("rabbitmqctl", "-q", *arguments)
    assert done.returncode == 0, f"rabbitmqctl {' '.join(arguments)} failed: {done.stdout}{done.stderr}"
    return done.stdout


def amqp_url(url: str, vhost: str) -> str:
    """``url`` with its virtual host replaced by ``vhost``."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + quote(vhost, safe="")))


def amqp_ready(url: str) -> bool:
    parameters = pika.URLParameters(url)
    parameters.connection_attempts = 1
    parameters.socket_timeout = 1
    try:
        pika.BlockingConnection(parameters).close()
        return True
    except pika.exceptions.AMQPError:
        return False


class RabbitmqServer(BrokerServer):
    """A RabbitMQ virtual host made for one run: queues of the same name in two virtual
    hosts are two queues, so no other run takes our messages."""

    name = "RabbitMQ"
    key = "rabbitmq"
    variable = "RABBITMQ_URL"
    start_variable = "STEPWISE_TEST_RABBITMQ_START"
    keeps_messages = True
    poll_seconds = 0.0

    def __init__(self, url: str, vhost: str) -> None:
        super().__init__(amqp_url(url, vhost))
        self.vhost = vhost

    def client(self) -> dramatiq.Broker:
        from dramatiq.brokers.rabbitmq import RabbitmqBroker

        return RabbitmqBroker(url=self.url)

    def ready(self) -> bool:
        return amqp_ready(self.url)

    def stop(self) -> None:
        """``rabbitmqctl shutdown`` stops the node and waits for it to exit. Its durable
        queues keep their messages; every connection is closed."""
        rabbitmqctl("shutdown")
        wait_for(lambda: not self.ready(), "RabbitMQ to stop")

    def state(self, worker_processes: int) -> str:
        """Per queue: messages ready, delivered but not acknowledged, and consumers (one per
        worker process for the queue and one for its delay queue, and this process's none)."""
        columns = ("name", "messages_ready", "messages_unacknowledged", "consumers")
        try:
            rows = rabbitmqctl("list_queues", "-p", self.vhost, "--no-table-headers", *columns)
        except AssertionError as error:
            return f"RabbitMQ {self.url}: unknown ({error})"
        queues = {row.split()[0]: tuple(int(n) for n in row.split()[1:]) for row in rows.splitlines() if row}
        return (
            f"RabbitMQ {self.url} ({worker_processes} worker processes): (ready, unacked, consumers) {queues}"
        )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def delete_abandoned_vhosts() -> None:
    for name in rabbitmqctl("list_vhosts", "--no-table-headers").split():
        match = VHOST.match(name)
        if match and not alive(int(match.group(1))):
            rabbitmqctl("delete_vhost", name)


@contextlib.contextmanager
def rabbitmq_server(owner: str) -> Iterator[RabbitmqServer]:
    """A new virtual host on ``STEPWISE_TEST_RABBITMQ``'s server, its user allowed everything
    there; deleted at the end, with its queues."""
    if not amqp_ready(RABBITMQ_URL):
        unavailable(f"RabbitMQ is not reachable at {RABBITMQ_URL}")
    delete_abandoned_vhosts()
    server = RabbitmqServer(RABBITMQ_URL, f"stepwise_test_{os.getpid()}_{uuid.uuid4().hex[:6]}")
    rabbitmqctl("add_vhost", server.vhost)
    try:
        user = urlsplit(RABBITMQ_URL).username or "guest"
        rabbitmqctl("set_permissions", "-p", server.vhost, user, ".*", ".*", ".*")
        yield server
    finally:
        if not amqp_ready(RABBITMQ_URL):  # a failed test of restarts left it down
            server.start()
        rabbitmqctl("delete_vhost", server.vhost)


# --- fixtures -------------------------------------------------------------------------

SERVERS: dict[str, Callable[[str], contextlib.AbstractContextManager[Any]]] = {
    "redis": redis_server,
    "rabbitmq": rabbitmq_server,
}


@pytest.fixture(scope="module", params=BROKERS)
def broker_server(request: pytest.FixtureRequest) -> Iterator[BrokerServer]:
    """This module's broker, once per broker of ``STEPWISE_TEST_BROKERS``."""
    if request.param not in SERVERS:
        pytest.fail(f"STEPWISE_TEST_BROKERS names {request.param!r}; known: {', '.join(SERVERS)}")
    owner = f"{request.module.__name__.rsplit('.', 1)[-1]}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    with SERVERS[request.param](owner) as server:
        yield server


@pytest.fixture(scope="module")
def broker_client(broker_server: BrokerServer) -> Iterator[dramatiq.Broker]:
    """This process's messages (``later()``, a completion's next step) go to the broker too."""
    real = broker_server.client()
    broker.use(real)
    yield real
    testing.setup()
    real.close()
