"""Growth: engine throughput on empty tables, then with a large completed history in them.

    .venv/bin/python bench/growth.py [--trees 2000] [--rows 1000000]

Runs the throughput benchmark's trees on empty tables, seeds ``--rows`` completed actions
(with their steps, invocations, links and history, bench/seed.py), and runs the same trees
again with the same worker processes. Prints both runs and the ratio; the target is that
the cost per action does not grow with history (throughput within 10%).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common, processes, seed
from bench.common import say
from bench.figures import table
from bench.processes import Workers, running, worker_env
from bench.throughput import EngineRun, measure_trees


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trees", type=int, default=2000, help="trees in each measured run (default 2000)")
    parser.add_argument(
        "--rows",
        type=int,
        default=1_000_000,
        help="completed actions seeded between the runs (default 1000000)",
    )
    processes.add_worker_arguments(parser)
    parser.add_argument(
        "--warmup", type=int, default=50, help="trees run unmeasured before each run (default 50)"
    )
    parser.add_argument("--engine-log", default="", help="level of the 'stepwise' logger in the workers")
    return parser.parse_args(argv)


def figures(run: EngineRun) -> dict[str, str]:
    per = run.per_action
    return {
        "actions/s": f"{run.actions_per_second:.1f}",
        "worker CPU ms/action": f"{per(run.worker_cpu) * 1000:.2f}",
        "PostgreSQL CPU ms/action": f"{per(run.postgres_cpu.total) * 1000:.2f}",
        "  this database's backends": f"{per(run.postgres_cpu.database) * 1000:.2f}",
        "SQL statements/action": f"{per(run.sql.total_statements):.1f}",
        "transactions/action": f"{run.transactions_per_action:.2f}",
        "seconds": f"{run.seconds:.2f}",
        "actions succeeded": f"{run.statuses.get('succeeded', 0)}/{run.actions}",
    }


def ratio(empty: str, full: str) -> str:
    try:
        return f"{float(full) / float(empty):.3f}"
    except (ValueError, ZeroDivisionError):
        return ""


def main(argv: list[str] | None = None) -> None:
    args = arguments(argv)
    say(common.machine())
    with common.fresh_database("stepwise_growth") as database_url, common.claimed_redis() as redis_url:
        common.create_schema(database_url)
        common.use_redis_broker(redis_url)
        workers = Workers(args.processes, args.threads, database_url, redis_url, worker_env(args))
        with running(workers):
            if args.warmup:
                measure_trees(workers, database_url, args.warmup)
            say(f"empty tables: {args.trees} trees")
            empty = measure_trees(workers, database_url, args.trees)
            seeded = seed.seed(database_url, args.rows)
            if args.warmup:
                measure_trees(workers, database_url, args.warmup)
            say(f"with history: {args.trees} trees")
            full = measure_trees(workers, database_url, args.trees)

    before, after = figures(empty), figures(full)
    rows = [(name, before[name], after[name], ratio(before[name], after[name])) for name in before]
    table(
        f"Growth: {args.trees} trees on empty tables, then after seeding {args.rows} completed actions "
        f"({common.machine()})",
        rows,
        header=("figure", "empty", "with history", "ratio"),
        values=3,
    )
    print(f"\n{seeded.summary()}")
    print(
        f"throughput with history / empty: {full.actions_per_second / empty.actions_per_second:.3f} "
        "(target ≥ 0.90)"
    )


if __name__ == "__main__":
    main()
