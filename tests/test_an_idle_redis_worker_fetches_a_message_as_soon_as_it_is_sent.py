"""An idle Redis consumer waits on its queue's doorbell, not in Dramatiq's growing poll
sleeps: a message sent to it is fetched at once, a message sent without a ring (by a plain
``RedisBroker``) still arrives, and rings never pile up (engine/redis_doorbell.py)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import dramatiq
import pytest
import redis
from dramatiq.brokers.redis import RedisBroker

from engine.redis_doorbell import RINGS_KEPT, DoorbellRedisBroker, doorbell
from tests.conftest import unavailable

REDIS_URL = "redis://127.0.0.1:6379/14"
QUEUE = "doorbell-test"


@pytest.fixture
def namespace() -> Iterator[str]:
    name = f"stepwise-doorbell-{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.RedisError as error:
        unavailable(f"Redis is not reachable at {REDIS_URL}: {error}")
    yield name
    for key in client.scan_iter(f"{name}*"):
        client.delete(key)
    client.close()


@pytest.fixture
def broker(namespace: str) -> DoorbellRedisBroker:
    broker = DoorbellRedisBroker(url=REDIS_URL, namespace=namespace)
    broker.declare_queue(QUEUE)
    return broker


def a_message() -> dramatiq.Message:  # type: ignore[type-arg]
    return dramatiq.Message(queue_name=QUEUE, actor_name="noop", args=(), kwargs={}, options={})


class Receiver:
    """A consumer of ``QUEUE`` in a thread, as a Dramatiq worker's consumer thread runs it:
    ``next()`` until a message comes, noting when it came."""

    def __init__(self, broker: dramatiq.Broker, timeout_ms: int) -> None:
        self.consumer = broker.consume(QUEUE, prefetch=4, timeout=timeout_ms)
        self.received: list[float] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.stop.is_set():
            message = next(self.consumer)
            if message is not None:
                self.received.append(time.monotonic())
                self.consumer.ack(message)

    def wait(self, count: int, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while len(self.received) < count and time.monotonic() < deadline:
            time.sleep(0.002)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        self.consumer.close()


@contextmanager
def receiving(broker: dramatiq.Broker, timeout_ms: int) -> Iterator[Receiver]:
    receiver = Receiver(broker, timeout_ms)
    try:
        yield receiver
    finally:
        receiver.close()


def test_a_message_sent_to_an_idle_consumer_is_fetched_at_once(broker: DoorbellRedisBroker) -> None:
    with receiving(broker, timeout_ms=5000) as receiver:
        # Idle for a second: Dramatiq's polling consumer would now sleep 0.3-1.3 s between
        # fetches.
        time.sleep(1.0)
        sent = time.monotonic()
        broker.enqueue(a_message())
        receiver.wait(1, 6.0)
        assert receiver.received, "the message never arrived"
        assert receiver.received[0] - sent < 0.15


def test_a_message_sent_without_a_ring_still_arrives(broker: DoorbellRedisBroker, namespace: str) -> None:
    with receiving(broker, timeout_ms=300) as receiver:
        time.sleep(0.5)
        plain = RedisBroker(url=REDIS_URL, namespace=namespace)
        plain.declare_queue(QUEUE)
        sent = time.monotonic()
        plain.enqueue(a_message())
        receiver.wait(1, 5.0)
        assert receiver.received, "a message without a ring was never fetched"
        # At most one wait on the doorbell (the worker timeout), and a fetch.
        assert receiver.received[0] - sent < 0.3 + 0.2


def test_rings_are_capped_while_no_consumer_is_idle(broker: DoorbellRedisBroker, namespace: str) -> None:
    for _ in range(50):
        broker.enqueue(a_message())
    assert broker.client.llen(doorbell(namespace, QUEUE)) == RINGS_KEPT
    with receiving(broker, timeout_ms=1000) as receiver:
        receiver.wait(50, 10.0)
        assert len(receiver.received) == 50


def script_exists_calls(client: redis.Redis) -> int:  # type: ignore[type-arg]
    stats = client.info("commandstats")
    return int(stats.get("cmdstat_script|exists", {}).get("calls", 0))


def test_a_message_is_sent_in_one_round_trip(broker: DoorbellRedisBroker) -> None:
    # A pipeline holding a registered script asks Redis whether the script exists before
    # every execute: a second round trip for each message sent.
    broker.enqueue(a_message())
    before = script_exists_calls(broker.client)
    for _ in range(20):
        broker.enqueue(a_message())
    assert script_exists_calls(broker.client) == before
    assert broker.client.llen(f"{broker.namespace}:{QUEUE}") == 21


def test_a_message_sent_after_redis_forgot_its_scripts_is_enqueued(broker: DoorbellRedisBroker) -> None:
    broker.enqueue(a_message())
    broker.client.script_flush()  # as after a restart of Redis without persistence
    broker.enqueue(a_message())
    assert broker.client.llen(f"{broker.namespace}:{QUEUE}") == 2
    with receiving(broker, timeout_ms=1000) as receiver:
        receiver.wait(2, 10.0)
        assert len(receiver.received) == 2


def evalsha_calls(client: redis.Redis) -> int:  # type: ignore[type-arg]
    return int(client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))


def test_messages_sent_together_take_one_call_and_each_arrive_once(broker: DoorbellRedisBroker) -> None:
    broker.maintenance_chance = 0  # no maintenance draw: the call count is the sends' own
    hooks: list[str] = []

    class Hooks(dramatiq.Middleware):
        def before_enqueue(self, broker: dramatiq.Broker, message: dramatiq.Message, delay: int) -> None:  # type: ignore[type-arg]
            hooks.append(f"before {message.args[0]}")

        def after_enqueue(self, broker: dramatiq.Broker, message: dramatiq.Message, delay: int) -> None:  # type: ignore[type-arg]
            hooks.append(f"after {message.args[0]}")

    broker.add_middleware(Hooks())
    messages = [a_message()._replace(args=(n,)) for n in range(5)]
    before = evalsha_calls(broker.client)
    sent = broker.enqueue_all(messages)
    assert evalsha_calls(broker.client) == before + 1
    assert len({message.options["redis_message_id"] for message in sent}) == 5
    assert hooks == [f"before {n}" for n in range(5)] + [f"after {n}" for n in range(5)]
    # One ring per message, up to the cap: as many idle consumers wake as there is work.
    assert broker.client.llen(doorbell(broker.namespace, QUEUE)) == 5
    with receiving(broker, timeout_ms=1000) as receiver:
        receiver.wait(5, 10.0)
        time.sleep(0.3)  # none arrives twice
        assert len(receiver.received) == 5


def test_messages_of_several_queues_are_refused_together(broker: DoorbellRedisBroker) -> None:
    other = a_message()._replace(queue_name="elsewhere")
    with pytest.raises(ValueError, match="one queue"):
        broker.enqueue_all([a_message(), other])
    assert broker.client.llen(f"{broker.namespace}:{QUEUE}") == 0


def test_a_send_still_runs_dramatiqs_maintenance(broker: DoorbellRedisBroker, namespace: str) -> None:
    # A worker that fetched a message and died without acknowledging it: Dramatiq's
    # maintenance, which a share of enqueues runs, puts its message back on the queue.
    dead = DoorbellRedisBroker(url=REDIS_URL, namespace=namespace)
    dead.declare_queue(QUEUE)
    broker.enqueue(a_message())
    assert len(dead.do_fetch(QUEUE, 1)) == 1  # type: ignore[attr-defined]
    dead.client.zadd(f"{namespace}:__heartbeats__", {dead.broker_id: 0})  # long silent
    assert broker.client.llen(f"{namespace}:{QUEUE}") == 0
    broker.maintenance_chance = 1_000_000  # every enqueue draws it
    broker.enqueue_all([a_message()])
    assert broker.client.llen(f"{namespace}:{QUEUE}") == 2
