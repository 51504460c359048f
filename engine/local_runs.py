"""Local runs: the siblings of a child that a worker runs itself run on its own threads.

When a body starts children, the batch that concludes it admits them and its thread runs
the first child's step at once (engine/running.py). Its siblings must run in parallel, so
they used to go to the broker, one message each, and each was claimed again by whichever
worker received it: per sibling a send, a delivery, an acknowledgement and a claim of its
own in a later batch. A worker process started by the ``dramatiq`` command now keeps a
pool of threads for them, as many as its worker has (``--threads``), or
``STEPWISE_LOCAL_THREADS`` (0 turns it off): the batch that admits the siblings claims as
many as the pool has free threads for (``free``), in the transaction that opened them, and
they run on the pool at once, in parallel; the others go to the broker as before.

``bench/throughput.py`` (2 processes x 64 threads; one run at 8 and at 64, medians of 3 at
32 and with none): with 8 threads in each pool, 17,530 transitions for 2,000 trees and
0.200 actions/s per raw message/s; with 32, 16,130 and 0.249; with 64, 14,366 (nearly
every sibling run here) and 0.268; with none, 18,000 and 0.196. A pool's threads wait for
their batches as the worker's do, so a pool as large as the worker runs nearly all of them.

Nothing is less durable for it: a sibling run here is claimed by a committed lease that the
process's keeper extends while it runs (engine/claiming.py), as the first child's is; if
the process dies, the lease lapses and the sweeper sends the step again. A run that fails
with an error the engine did not handle gives its claim up and sends its step to the
broker, where Dramatiq retries it as it would the message.

Each run on the pool is under Dramatiq's time limit, as a message of the job it stands
for would be (``TimeLimit``: the ``time_limit`` option of ``stepwise.perform_step``, else
the ``TimeLimit`` middleware's own, 10 minutes by default): past it, Dramatiq's timer
interrupts the run, which gives its claim up and sends its step to the broker, as a run
that failed unhandled does (engine/running.py), and the thread is free again.

The pool works only between the worker's boot and its shutdown, in processes the
``dramatiq`` command started (engine/worker_process.py): a worker embedded in another
process (the studio's, a test's) and ``engine.testing`` send every sibling to the broker,
so what they run stays in their hands.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import dramatiq
from dramatiq.middleware import TimeLimit as DramatiqTimeLimit

from . import config

log = logging.getLogger("stepwise")

THREADS_VARIABLE = "STEPWISE_LOCAL_THREADS"


def configured_threads(default: int) -> int:
    """The pool's threads in a worker process: ``STEPWISE_LOCAL_THREADS`` if set (0: no
    pool), else ``default`` (the worker's own)."""
    return config.count(THREADS_VARIABLE, default)


@dataclass(frozen=True)
class TimeLimit:
    """Dramatiq's time limit over each run: ``manager`` is the ``TimeLimit`` middleware's
    timer, which interrupts a thread past its deadline (``dramatiq.middleware.Interrupt``)."""

    manager: Any
    milliseconds: float

    @classmethod
    def of(cls, broker: dramatiq.Broker, job: str) -> TimeLimit | None:
        """The limit a message of ``job`` runs under on ``broker``, as Dramatiq reckons it;
        None when the broker has no ``TimeLimit`` middleware."""
        for middleware in broker.middleware:
            if isinstance(middleware, DramatiqTimeLimit):
                limit = broker.get_actor(job).options.get("time_limit") or middleware.time_limit
                return cls(middleware.manager, limit)
        return None

    def start(self) -> None:
        self.manager.add_timeout(threading.get_ident(), self.milliseconds)

    def end(self) -> None:
        self.manager.remove_timeout(threading.get_ident())


class Pool:
    """A bounded pool of threads for runs handed over by other threads of this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._threads = 0
        self._busy = 0
        self._executor: ThreadPoolExecutor | None = None
        #: The limit each run starts under (``start``).
        self.time_limit: TimeLimit | None = None

    def start(self, threads: int, time_limit: TimeLimit | None = None) -> None:
        """Take runs on ``threads`` threads (started as runs come), each run under
        ``time_limit`` if one is given."""
        with self._lock:
            if threads and self._executor is None:
                self._executor = ThreadPoolExecutor(threads, thread_name_prefix="stepwise-local")
            self._threads = threads
            self.time_limit = time_limit

    def stop(self) -> None:
        """Take no more runs; those running finish (the process waits for them at exit)."""
        with self._lock:
            self._threads = 0
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False)

    def free(self) -> int:
        """Threads free for runs now: a hint, read without a reservation (a run handed in
        when none is free waits for one)."""
        return max(0, self._threads - self._busy)

    def submit(self, run: Callable[[], Any]) -> bool:
        """Run ``run()`` on a thread of the pool; False when the pool takes no runs (then
        the caller runs it)."""
        with self._lock:
            if self._executor is None:
                return False
            self._busy += 1
            self._executor.submit(self._run, run)
        return True

    def _run(self, run: Callable[[], Any]) -> None:
        time_limit = self.time_limit
        if time_limit is not None:
            time_limit.start()
        try:
            run()
        except Exception:
            log.exception("a local run failed")
        finally:
            with self._lock:
                self._busy -= 1
            if time_limit is not None:
                time_limit.end()


pool = Pool()
