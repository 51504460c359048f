"""The garbage collector of a worker process, set for a long-lived process that makes
short-lived objects by the million.

A worker's transitions make and drop thousands of objects a second (ORM objects, rows,
sessions). Python's cyclic collector runs its youngest generation every 700 net
allocations and, now and then, scans the whole heap, the modules, mappers and compiled
statements loaded at boot included; with 64 threads many objects are alive at each
collection, so many reach the oldest generation and make those scans frequent. Measured
in the workers of ``bench/throughput.py`` (2 processes x 64 threads, the CPU time of the
threads while they collected): 6.7-7.4% of their CPU, ~1,300 collections for 10,000
actions. Once a ``dramatiq`` worker process has booted (its modules imported, its threads
started), this:

- freezes what exists then (``gc.freeze()``, after a last collection): the boot heap
  lives as long as the process, and no collection scans it again;
- collects the youngest generation every ``STEPWISE_GC_THRESHOLD`` net allocations
  (default 10,000) instead of 700. Most objects die by reference count, never reaching a
  collection; those in cycles (a session and its objects) wait a little longer.

Together they took collections to 0.2-0.3% of the workers' CPU (11-13 collections), at the
same peak memory (84-87 MB a process). Only processes that the ``dramatiq`` command
started are tuned (engine/worker_process.py); a worker embedded in another process (the
studio's, a test's) leaves that process's collector as it is. ``STEPWISE_GC_THRESHOLD=0``
keeps Python's defaults.
"""

from __future__ import annotations

import gc

from . import config

THRESHOLD_VARIABLE = "STEPWISE_GC_THRESHOLD"
DEFAULT_THRESHOLD = 10_000


def threshold() -> int:
    """The youngest generation's threshold from the environment; 0 leaves Python's."""
    return config.count(THRESHOLD_VARIABLE, DEFAULT_THRESHOLD)


def tune(youngest: int) -> None:
    """Freeze what the process holds now and collect the youngest generation every
    ``youngest`` net allocations (0: leave the collector as it is)."""
    if not youngest:
        return
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(youngest, older, oldest)
