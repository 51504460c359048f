"""The engine's hot path in one process, one thread: no broker, no worker processes, no
thread switching. What one action costs the engine itself, in CPU and in SQL.

    .venv/bin/python bench/hotpath.py [--trees 500] [--profile out.prof]

Trees of the throughput workload are invoked, then drained in this process through the
same jobs the workers run (the in-memory stub broker, ``engine.testing.drain``). Prints
the engine's CPU per action (this process, ``time.process_time``), PostgreSQL's CPU per
action (this database's backend), and the statements and transactions per action. This
is the loop to profile when the throughput figure misses (``--profile`` writes a
cProfile file; ``python -m pstats`` reads it).
"""

from __future__ import annotations

import argparse
import cProfile
import logging
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import func, select

from bench import common
from bench.figures import SqlCounts, table
from bench.processes import postgres_cpu


def run(url: str, trees: int, warmup: int, profile: str | None) -> list[tuple[str, ...]]:
    import engine
    from bench import workload
    from bench.workload import ACTIONS_PER_TREE, Tree
    from engine import config, db, testing, worker_gc
    from engine.action import Action

    common.create_schema(url)
    sa_engine = engine.configure(url, pool_size=2)
    workload.install_counters()
    testing.setup()
    config.admit_children_here = True  # as in a worker: children admitted in-process (testing turns it off)
    logging.getLogger("stepwise").setLevel(logging.WARNING)

    def grow(count: int, first: int) -> None:
        with db.transaction() as session:
            for n in range(first, first + count):
                tree = Tree(id=n)
                session.add(tree)
                session.flush()
                engine.later(tree, "grow")
        testing.drain()

    grow(warmup, 1)
    worker_gc.tune(worker_gc.threshold())  # as a worker process does once it booted
    before = workload.snapshot()
    database = common.database_name(url)
    pg_before = postgres_cpu(database)
    cpu_before, wall_before = time.process_time(), time.perf_counter()
    profiler = cProfile.Profile(time.process_time) if profile else None  # CPU, not waits
    if profiler:
        profiler.enable()
    grow(trees, warmup + 1)
    if profiler:
        profiler.disable()
        profiler.dump_stats(profile)
    cpu, wall = time.process_time() - cpu_before, time.perf_counter() - wall_before
    pg = postgres_cpu(database) - pg_before
    sql = SqlCounts.between(before, workload.snapshot())  # type: ignore[arg-type]
    with sa_engine.connect() as connection:
        statuses = dict(connection.execute(select(Action.status, func.count()).group_by(Action.status)).all())
    sa_engine.dispose()
    actions = trees * ACTIONS_PER_TREE
    per = 1000 / actions
    return [
        ("trees", f"{trees}", f"{actions} actions; statuses {statuses}"),
        ("engine CPU/action", f"{cpu * per:.2f} ms", "this process: Python, SQLAlchemy, psycopg"),
        ("PostgreSQL CPU/action", f"{pg.database * per:.2f} ms", "this database's backend"),
        ("wall/action", f"{wall * per:.2f} ms", "one thread, waits included"),
        (
            "statements/action",
            f"{sql.total_statements / actions:.1f}",
            sql.by_kind(actions),
        ),
        ("transactions/action", f"{sql.transactions / actions:.2f}", ""),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trees", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--profile", help="write a cProfile file of the measured drain")
    options = parser.parse_args()
    with common.fresh_database("stepwise_hotpath") as url:
        rows = run(url, options.trees, options.warmup, options.profile)
    table(f"Hot path, one process and one thread ({common.machine()})", rows)


if __name__ == "__main__":
    main()
