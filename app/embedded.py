"""The embedded default: Dramatiq's in-memory broker, an in-process worker and a clock
thread (the sweeper, and the schedules' ticks), all inside the studio's process
(``stepwise serve`` without REDIS_URL).

Nothing else needs installing. The database stays the truth: messages still in memory when
the process stops are sent again by the sweeper of the next start (after its grace period).
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta

import dramatiq
from dramatiq.brokers.stub import StubBroker

import engine
from engine import broker, registry, schedules, sweeper

log = logging.getLogger("stepwise.studio")


class Embedded:
    """An in-process worker on the in-memory broker, a sweeper every ``sweep_every`` s, and
    the schedules' clock: declared schedules synced at start, due ticks fired every
    ``tick_every`` s."""

    def __init__(
        self,
        *,
        worker_threads: int = 2,
        sweep_every: float = 5.0,
        grace: timedelta = sweeper.GRACE,
        tick_every: float = 1.0,
    ) -> None:
        self.worker_threads = worker_threads
        self.sweep_every = sweep_every
        self.tick_every = tick_every
        self.grace = grace
        self.broker: StubBroker | None = None
        self.worker: dramatiq.Worker | None = None
        self._stop = threading.Event()
        self._sweeper: threading.Thread | None = None

    def start(self) -> None:
        from engine import jobs

        stub = StubBroker()
        # The worker starts before any queue is declared: a queue declared later gets its
        # consumer from the worker's middleware, the delay queue with the delay prefetch.
        # (Declared earlier, the stub's delay queue would get the normal prefetch of
        # 2 x threads: a few far-off timeouts would then hold back every due retry.)
        self.worker = dramatiq.Worker(stub, worker_threads=self.worker_threads, worker_timeout=250)
        self.worker.start()
        broker.use(stub)
        for job in (jobs.admit, jobs.perform_step, jobs.timeout, jobs.wait_over, jobs.complete):
            if job.actor_name not in stub.get_declared_actors():
                stub.declare_actor(job)
        for job in registry.job_classes():
            if job.actor_name not in stub.get_declared_actors():
                stub.declare_actor(job)
        self.broker = stub
        self._sweeper = threading.Thread(target=self._sweep_forever, name="stepwise-sweeper", daemon=True)
        self._sweeper.start()

    def _sweep_forever(self) -> None:
        try:
            schedules.sync()
        except Exception:  # a database without the schedules' tables yet: said, not fatal
            log.exception("stepwise: the schedules declared in code could not be synced")
        next_sweep = time.monotonic() + self.sweep_every
        next_prune = time.monotonic()
        while not self._stop.wait(min(self.tick_every, self.sweep_every)):
            try:
                schedules.tick()
            except Exception:  # the database restarting, a locked file: next round
                log.exception("stepwise: the schedules' tick failed; trying again")
            if time.monotonic() < next_sweep:
                continue
            next_sweep = time.monotonic() + self.sweep_every
            try:
                with engine.new_session() as session:
                    sweeper.sweep(session, grace=self.grace)
                if time.monotonic() >= next_prune:
                    schedules.prune()
                    next_prune = time.monotonic() + schedules.retention.EVERY_SECONDS
            except Exception:  # the database restarting, a locked file: next round
                log.exception("stepwise: the sweep failed; trying again in %ss", self.sweep_every)

    def stop(self) -> None:
        self._stop.set()
        if self._sweeper is not None:
            self._sweeper.join(timeout=10)
        if self.worker is not None:
            self.worker.stop(timeout=5000)
