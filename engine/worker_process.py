"""What a worker process that the ``dramatiq`` command started does around its worker: once
the worker booted (its modules imported, its threads started), it tunes the process's
garbage collector (engine/worker_gc.py) and starts its pool of local runs
(engine/local_runs.py), each run under the time limit a message of ``local_job`` would
have; before the worker shuts down, it stops the pool.

Dramatiq's ``process_boot`` event comes only in such processes, before their worker's boot:
a worker embedded in another process (the studio's, a test's) leaves that process's
collector as it is and keeps no pool, so every sibling goes to its broker.
"""

from __future__ import annotations

from typing import Any

import dramatiq

from . import local_runs, worker_gc


class WorkerProcess(dramatiq.Middleware):
    def __init__(self, local_job: str) -> None:
        self.local_job = local_job
        self.worker_process = False

    def after_process_boot(self, broker: dramatiq.Broker) -> None:
        self.worker_process = True

    def after_worker_boot(self, broker: dramatiq.Broker, worker: Any) -> None:
        if self.worker_process:
            worker_gc.tune(worker_gc.threshold())
            local_runs.pool.start(
                local_runs.configured_threads(default=worker.worker_threads),
                local_runs.TimeLimit.of(broker, self.local_job),
            )

    def before_worker_shutdown(self, broker: dramatiq.Broker, worker: Any) -> None:
        local_runs.pool.stop()
