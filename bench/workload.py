"""The benchmarks' workload, imported by the ``dramatiq`` worker processes
(``dramatiq engine.jobs bench.workload``) and by the benchmark scripts.

A tree is one root ``grow`` whose first step starts three ``leaf`` children in parallel
(three lanes) and whose second step starts one more: 5 actions per tree, and 6 step rows
(the root's two, one per leaf). ``noop`` is the raw Dramatiq baseline, on the engine's queue.

Environment, read at import in the workers:

- ``DATABASE_URL``: configure the engine (pool of ``STEPWISE_POOL_SIZE`` connections, as
  ``stepwise worker`` sets it).
- ``STEPWISE_BENCH_COUNTS``: a directory; count the SQL statements, commits, rollbacks and
  pool pings of this process with SQLAlchemy event listeners, and the garbage collector's
  runs and time with its callbacks, and write the totals to
  ``<dir>/<pid>.json`` (rewritten every 0.2 s while they change).
- ``STEPWISE_BENCH_ENGINE_LOG``: the level of the ``stepwise`` logger (Dramatiq's default
  is INFO, where the engine logs only errors; DEBUG logs every history event).
"""

from __future__ import annotations

import gc
import json
import logging
import os
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import dramatiq
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.pool import Pool

import engine
from engine import Actor, StepContext
from engine import broker as engine_broker

#: Actions in one tree: the root and its four leaves.
ACTIONS_PER_TREE = 5
#: Step rows in one tree: the root's two steps and one per leaf.
STEP_ROWS_PER_TREE = 6


class BenchBase(DeclarativeBase):
    pass


class Tree(Actor, BenchBase):
    __tablename__ = "bench_trees"

    id: Mapped[int] = mapped_column(primary_key=True)

    @engine.action
    def grow(self, step: StepContext) -> None:
        """Three leaves in parallel: each in a lane of its own."""
        for n in (1, 2, 3):
            step.do("leaf", n)

    @grow.step
    def finish(self, step: StepContext) -> None:
        step.do("leaf", 4)

    @engine.action(concurrency_key=lambda tree, n: f"Tree/{tree.id}/leaf/{n}")
    def leaf(self, n: int) -> None:
        pass

    # --- bench/workflows.py: results along five steps, and a signal round trip ---------

    @engine.action(concurrency_key=lambda tree, n: f"Tree/{tree.id}/pipeline/{n}")
    def pipeline(self, step: StepContext, n: int) -> dict[str, int]:
        """Five steps, each taking what the one before returned and returning more."""
        return {"n": n, "total": 1}

    @pipeline.step
    def price(self, step: StepContext, n: int) -> dict[str, int]:
        return _add_one(step.previous_result)

    @pipeline.step
    def reserve(self, step: StepContext, n: int) -> dict[str, int]:
        return _add_one(step.previous_result)

    @pipeline.step
    def charge(self, step: StepContext, n: int) -> dict[str, int]:
        return _add_one(step.previous_result)

    @pipeline.step
    def ship(self, step: StepContext, n: int) -> dict[str, int]:
        return _add_one(step.previous_result)

    @engine.action(concurrency_key=lambda tree, n: f"Tree/{tree.id}/gate/{n}")
    def gate(self, step: StepContext, n: int) -> None:
        """Wait for the signal "go", then succeed with its payload."""
        step.wait_for("go")

    @gate.step
    def through(self, step: StepContext, n: int) -> object:
        return step.signal.payload if step.signal else None


def _add_one(result: dict[str, int]) -> dict[str, int]:
    return {**result, "total": result["total"] + 1}


engine_broker.setup()


@dramatiq.actor(actor_name="bench.noop", queue_name=engine_broker.QUEUE, max_retries=0)
def noop(*args: Any) -> None:
    """Raw Dramatiq: a message that does nothing."""


# --- counting, in the worker processes ------------------------------------------------

#: Each counting thread's counts (a thread counts in its own: a lock shared by every
#: statement of 64 threads put 0.7% of a worker's py-spy samples in the counting itself).
_counters: list[Counter[str]] = []
_own = threading.local()
_lock = threading.Lock()  # guards the list of counters


def _add(key: str) -> None:
    counts = getattr(_own, "counts", None)
    if counts is None:
        counts = _own.counts = Counter()
        with _lock:
            _counters.append(counts)
    counts[key] += 1


def install_counters() -> None:
    """Count what SQLAlchemy sends: statements by their first keyword, commits, rollbacks,
    savepoints; the pool's checkouts and new connections; the garbage collector's runs and
    their time."""

    @event.listens_for(Engine, "before_cursor_execute")
    def _statement(conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: bool) -> None:
        words = statement.lstrip().split(None, 1)
        _add("statement:" + (words[0].upper() if words else "?"))

    @event.listens_for(Engine, "commit")
    def _commit(conn: Any) -> None:
        _add("commit")

    @event.listens_for(Engine, "rollback")
    def _rollback(conn: Any) -> None:
        _add("rollback")

    @event.listens_for(Pool, "checkout")
    def _checkout(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        _add("checkout")

    @event.listens_for(Pool, "connect")
    def _connect(dbapi_connection: Any, record: Any) -> None:
        _add("connect")

    gc.callbacks.append(_time_collections)


#: The garbage collector's runs and their CPU time (µs, of the thread a run interrupts),
#: kept apart from the counters: a collection may start inside ``_lock`` (any allocation), so
#: its callback takes no lock; one collection runs at a time, holding the GIL.
_collections = {"gc": 0, "gc_us": 0, "since": 0}


def _time_collections(phase: str, info: dict[str, Any]) -> None:
    now = time.thread_time_ns()
    if phase == "start":
        _collections["since"] = now
    else:
        _collections["gc"] += 1
        _collections["gc_us"] += (now - _collections["since"]) // 1000


def snapshot() -> dict[str, int]:
    """The counters, with the group commit's: batches committed, transitions in them."""
    from engine import group_commit

    with _lock:
        counters = list(_counters)
    total: Counter[str] = Counter()
    for each in counters:
        total.update(dict(each))  # a copy: its thread may be counting meanwhile
    counts = dict(total)
    counts["gc"], counts["gc_us"] = _collections["gc"], _collections["gc_us"]
    group = group_commit.shared()
    counts["batches"], counts["batched"] = group.batches, group.transitions
    return counts


def write_counts_forever(directory: Path) -> None:
    path = directory / f"{os.getpid()}.json"
    written: dict[str, int] | None = None
    while True:
        current = snapshot()
        if current != written:
            temporary = path.with_suffix(".tmp")
            temporary.write_text(json.dumps(current))
            temporary.replace(path)
            written = current
        time.sleep(0.2)


if os.environ.get("STEPWISE_BENCH_ENGINE_LOG"):
    logging.getLogger("stepwise").setLevel(os.environ["STEPWISE_BENCH_ENGINE_LOG"].upper())

if os.environ.get("STEPWISE_BENCH_COUNTS"):
    install_counters()
    threading.Thread(
        target=write_counts_forever,
        args=(Path(os.environ["STEPWISE_BENCH_COUNTS"]),),
        name="bench-counts",
        daemon=True,
    ).start()

if os.environ.get("DATABASE_URL"):
    engine.configure()
