"""Dramatiq's Redis broker, with consumers that wait for a doorbell instead of polling.

Dramatiq's Redis consumer polls: when a fetch finds its queue empty it sleeps 5-10 ms,
then twice that after each further empty fetch, up to the worker timeout (1 s). A message
sent to an idle worker waited half a sleep on average before it was fetched: on a
one-step action, about 5 ms of a 25 ms p50 (``bench/latency.py``).

Here every message sent also pushes a ring onto its queue's doorbell (a Redis list kept
to a few entries), in the same round trip, and a consumer whose fetch finds nothing waits
on that list with ``BLPOP`` (up to the worker timeout) instead of sleeping, so it fetches
as soon as a message is sent. The doorbell carries nothing: the queue itself is unchanged,
messages are still fetched, acknowledged and recovered by Dramatiq's own scripts, and a
ring that is lost or never sent (a message enqueued by a plain ``RedisBroker``) costs at
most the wait Dramatiq's polling would have had. An idle worker makes one Redis call per
worker timeout instead of one every few milliseconds.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

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


def doorbell(namespace: str, queue_name: str) -> str:
    """The Redis list that rings for ``queue_name``."""
    return f"{namespace}:{queue_name}.doorbell"


class DoorbellRedisBroker(RedisBroker):
    """A ``RedisBroker`` whose sends ring their queue's doorbell and whose consumers wait
    on it."""

    @property
    def consumer_class(self) -> type[_RedisConsumer]:
        return DoorbellConsumer

    def do_enqueue(self, queue_name: str, *args: Any) -> Any:
        # One round trip: Dramatiq's enqueue script (the arguments its ``_dispatch``
        # passes), then the ring. The script is called by its digest alone: a pipeline
        # given the script object would first ask Redis whether it exists, a second round
        # trip for every message.
        script_args = [
            "enqueue",
            current_millis(),
            queue_name,
            self.broker_id,
            self.heartbeat_timeout,
            self.dead_message_ttl,
            self._should_do_maintenance("enqueue"),
            self._max_unpack_size(),  # type: ignore[no-untyped-call]
            *args,
        ]
        try:
            return self._enqueue_and_ring(queue_name, script_args)
        except redis.exceptions.NoScriptError:
            # Redis forgot its scripts (a restart without persistence, SCRIPT FLUSH): the
            # enqueue did not run, so load the script (its digest is the same) and send
            # again (the first ring, if it was made, only costs a consumer one empty fetch).
            self.client.script_load(self.scripts["dispatch"].script)
            return self._enqueue_and_ring(queue_name, script_args)

    def _enqueue_and_ring(self, queue_name: str, script_args: list[Any]) -> Any:
        bell = doorbell(self.namespace, queue_name)
        pipeline = self.client.pipeline(transaction=False)
        pipeline.evalsha(self.scripts["dispatch"].sha, 1, self.namespace, *script_args)
        pipeline.lpush(bell, 1)
        pipeline.ltrim(bell, 0, RINGS_KEPT - 1)
        return pipeline.execute()[0]


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
