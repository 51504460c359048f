"""Dramatiq's Redis broker, with consumers that wait for a doorbell instead of polling.

Dramatiq's Redis consumer polls: when a fetch finds its queue empty it sleeps 5-10 ms,
then twice that after each further empty fetch, up to the worker timeout (1 s). A message
sent to an idle worker waited half a sleep on average before it was fetched: on a
one-step action, about 5 ms of a 25 ms p50 (``bench/latency.py``).

Here every message sent also pushes a ring onto its queue's doorbell (a Redis list kept
to a few entries), in the same script call (``ENQUEUE_AND_RING``, which also sends several
messages of one queue at once: ``enqueue_all``), and a consumer whose fetch finds nothing waits
on that list with ``BLPOP`` (up to the worker timeout) instead of sleeping, so it fetches
as soon as a message is sent. The doorbell carries nothing: the queue itself is unchanged
(each message stored as Dramatiq's dispatch script stores it, and fetched, acknowledged and
recovered by that script), and a
ring that is lost or never sent (a message enqueued by a plain ``RedisBroker``) costs at
most the wait Dramatiq's polling would have had. An idle worker makes one Redis call per
worker timeout instead of one every few milliseconds.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import Any
from uuid import uuid4

import redis
from dramatiq.broker import MessageProxy
from dramatiq.brokers.redis import RedisBroker, _RedisConsumer
from dramatiq.common import compute_backoff, current_millis
from dramatiq.errors import ConnectionClosed
from dramatiq.message import Message

#: Rings kept on a doorbell. Rings pile up while every consumer is busy (each sent message
#: rings once); when a consumer turns idle it takes them one by one, each followed by an
#: empty fetch, so the cap bounds that waste.
RINGS_KEPT = 8

#: Dramatiq's ``enqueue`` (its dispatch script's: the sender's heartbeat, each message's
#: data in the queue's hash and its id at the queue's tail) for any number of messages of
#: one queue, then one ring per message (at most ``RINGS_KEPT``) on the queue's doorbell: one
#: call for them all, where a pipeline of the dispatch script and the ring per message cost a
#: worker three commands' Python each. KEYS: the namespace; ARGV: the queue, the broker's
#: id, the time in ms, ``RINGS_KEPT``, then each message's id and data.
ENQUEUE_AND_RING = """
local namespace = KEYS[1]
local queue = namespace .. ":" .. ARGV[1]
redis.call("zadd", namespace .. ":__heartbeats__", ARGV[3], ARGV[2])
for i = 5, #ARGV, 2 do
    redis.call("hset", queue .. ".msgs", ARGV[i], ARGV[i + 1])
    redis.call("rpush", queue, ARGV[i])
end
local bell = queue .. ".doorbell"
for _ = 1, math.min((#ARGV - 4) / 2, tonumber(ARGV[4])) do
    redis.call("lpush", bell, 1)
end
redis.call("ltrim", bell, 0, tonumber(ARGV[4]) - 1)
"""


def doorbell(namespace: str, queue_name: str) -> str:
    """The Redis list that rings for ``queue_name``."""
    return f"{namespace}:{queue_name}.doorbell"


class DoorbellRedisBroker(RedisBroker):
    """A ``RedisBroker`` whose sends ring their queue's doorbell and whose consumers wait
    on it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]
        self.enqueue_script = self.client.register_script(ENQUEUE_AND_RING)

    @property
    def consumer_class(self) -> type[_RedisConsumer]:
        return DoorbellConsumer

    def enqueue_all(self, messages: Sequence[Message[Any]]) -> list[Message[Any]]:
        """Enqueue ``messages`` (of one queue, none delayed) in one round trip, as
        ``enqueue`` would one by one: the same middleware hooks, the same Redis rows."""
        if len({message.queue_name for message in messages}) > 1:
            raise ValueError("enqueue_all takes messages of one queue")
        sent = [message.copy(options={"redis_message_id": str(uuid4())}) for message in messages]
        for message in sent:
            self.emit_before("enqueue", message, None)
        if sent:
            pairs = [(message.options["redis_message_id"], message.encode()) for message in sent]
            self._enqueue_and_ring(sent[0].queue_name, pairs)
        for message in sent:
            self.emit_after("enqueue", message, None)
        return sent

    def do_enqueue(self, queue_name: str, message_id: str, data: bytes) -> Any:
        return self._enqueue_and_ring(queue_name, [(message_id, data)])

    def _enqueue_and_ring(self, queue_name: str, pairs: list[tuple[str, bytes]]) -> Any:
        # Dramatiq's dispatch script runs its maintenance (requeueing a dead worker's
        # messages, expiring dead letters) on a random share of enqueues: so does this, by
        # that script, before its own.
        now = current_millis()
        if self._should_do_maintenance("enqueue"):
            # A command the script does not know: its heartbeat and maintenance alone.
            maintain = ["maintain", now, queue_name, self.broker_id, self.heartbeat_timeout]
            maintain += [self.dead_message_ttl, 1, self._max_unpack_size()]  # type: ignore[no-untyped-call]
            self.scripts["dispatch"](args=maintain, keys=[self.namespace])
        # Called by its digest; redis-py loads it and calls again if Redis forgot it (a
        # restart without persistence, SCRIPT FLUSH): the first call did not run then.
        args: list[Any] = [queue_name, self.broker_id, now, RINGS_KEPT]
        for message_id, data in pairs:
            args += (message_id, data)
        return self.enqueue_script(keys=[self.namespace], args=args)


class DoorbellConsumer(_RedisConsumer):
    """Dramatiq's Redis consumer, waiting on its queue's doorbell when its fetch finds no
    message, instead of sleeping."""

    def __init__(self, broker: RedisBroker, queue_name: str, prefetch: int, timeout: int) -> None:
        super().__init__(broker, queue_name, prefetch, timeout)  # type: ignore[no-untyped-call]
        self.doorbell = doorbell(broker.namespace, queue_name)
        # At most the worker timeout, and less than the connection's read timeout (redis-py's
        # default is 5 s), which would otherwise end the wait with an error.
        self.ring_wait = timeout / 1000
        read_timeout = broker.client.connection_pool.connection_kwargs.get("socket_timeout")
        if read_timeout:
            self.ring_wait = min(self.ring_wait, read_timeout / 2)

    def __next__(self) -> Any:
        try:
            while True:
                if self.message_cache:
                    data = self.message_cache.pop(0)
                    if data is None:
                        continue
                    self.misses = 0
                    message = Message.decode(data)
                    self.queued_message_ids.add(message.message_id)
                    return MessageProxy(message)
                messages = []
                if self.outstanding_message_count < self.prefetch:
                    self.message_cache = messages = self.broker.do_fetch(
                        self.queue_name, self.prefetch - self.outstanding_message_count
                    )
                if messages:
                    continue
                if self.outstanding_message_count < self.prefetch:
                    self._wait_for_a_ring()
                else:
                    # Prefetch is full: nothing to fetch until a message is acknowledged.
                    self.misses, backoff_ms = compute_backoff(self.misses, max_backoff=self.timeout)
                    time.sleep(backoff_ms / 1000)
                return None
        except redis.ConnectionError as error:
            raise ConnectionClosed(error) from None  # type: ignore[no-untyped-call]

    def _wait_for_a_ring(self) -> None:
        """Block until a message rings, for at most ``ring_wait`` seconds."""
        with contextlib.suppress(redis.TimeoutError):  # a slow server: fetch again
            self.broker.client.blpop([self.doorbell], timeout=self.ring_wait)
