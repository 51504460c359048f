"""Growth: engine throughput on empty tables, and with a large completed history in them.

    .venv/bin/python bench/growth.py [--trees 2000] [--rows 1000000] [--rounds 3]

Seeds ``--rows`` completed actions (with their steps, invocations, links and history,
bench/seed.py) into one database and leaves another empty, then runs the throughput
benchmark's trees on each in turn, ``--rounds`` times, each run with worker processes of
its own (started, warmed up, stopped), the order swapped every round. Prints each round's
ratio and the round with the median ratio side by side; the target is that the cost per
action does not grow with history (throughput within 10%). On this shared 2-CPU machine
one run's throughput moves by tens of percent from one minute to the next: one pair of
runs, empty then seeded, measured the machine's drift as much as the history's cost
(ratios of 1.243, 0.965 and 0.777 for the same code on 2026-12-07).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg

from bench import common, processes, seed
from bench.common import say
from bench.engine_run import EngineRun, measure_trees
from bench.figures import median_round, table
from bench.processes import Workers, running, worker_env


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trees", type=int, default=2000, help="trees in each measured run (default 2000)")
    parser.add_argument(
        "--rows",
        type=int,
        default=1_000_000,
        help="completed actions seeded in the database with history (default 1000000)",
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="runs on each database, alternating (default 3)"
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


@dataclass
class Round:
    number: int
    empty: EngineRun
    full: EngineRun

    @property
    def ratio(self) -> float:
        return self.full.actions_per_second / self.empty.actions_per_second

    def summary(self) -> str:
        return (
            f"round {self.number}: {self.empty.actions_per_second:.1f} actions/s empty, "
            f"{self.full.actions_per_second:.1f} with history, ratio {self.ratio:.3f}"
        )


def measure_on(database_url: str, redis_url: str, args: argparse.Namespace) -> EngineRun:
    """``--trees`` trees on ``database_url`` by worker processes started for them (after
    ``--warmup`` unmeasured trees), stopped after."""
    import engine

    engine.configure(database_url, pool_size=5)  # the trees are this database's
    workers = Workers(args.processes, args.threads, database_url, redis_url, worker_env(args))
    with running(workers):
        if args.warmup:
            measure_trees(workers, database_url, args.warmup)
        # Both databases with statistics, as autovacuum keeps them: the seeded one has its
        # seeder's, and this machine's server runs with autovacuum off, which left the empty
        # one planned with none (each round's ratio 1.20-1.50 without this).
        with psycopg.connect(database_url, autocommit=True) as connection:
            connection.execute("ANALYZE")
        return measure_trees(workers, database_url, args.trees)


def main(argv: list[str] | None = None) -> None:
    args = arguments(argv)
    say(common.machine())
    with (
        common.fresh_database("stepwise_growth") as empty_url,
        common.fresh_database("stepwise_growth") as full_url,
        common.claimed_redis() as redis_url,
    ):
        common.create_schema(empty_url)
        common.create_schema(full_url)
        seeded = seed.seed(full_url, args.rows)
        # The seeding's gigabytes of WAL leave a checkpoint to write: done now, it does not
        # land in whichever runs come first.
        with psycopg.connect(common.POSTGRES_ADMIN_URL, autocommit=True) as admin:
            admin.execute("CHECKPOINT")
        common.use_redis_broker(redis_url)
        rounds = []
        for n in range(1, args.rounds + 1):
            runs: dict[str, EngineRun] = {}
            order = [("empty", empty_url), ("with history", full_url)]
            for label, url in order if n % 2 else order[::-1]:
                say(f"round {n}/{args.rounds}: {label}, {args.trees} trees")
                runs[label] = measure_on(url, redis_url, args)
            rounds.append(Round(n, runs["empty"], runs["with history"]))
            say(rounds[-1].summary())

    median = median_round(rounds)
    before, after = figures(median.empty), figures(median.full)
    rows = [(name, before[name], after[name], ratio(before[name], after[name])) for name in before]
    table(
        f"Growth: {args.trees} trees on empty tables and with {args.rows} completed actions, "
        f"round {median.number} of {len(rounds)} (the median ratio) ({common.machine()})",
        rows,
        header=("figure", "empty", "with history", "ratio"),
        values=3,
    )
    print(f"\n{seeded.summary()}")
    print(f"ratio of each round: {', '.join(f'{r.ratio:.3f}' for r in rounds)}")
    print(f"throughput with history / empty: {median.ratio:.3f}, the median of {len(rounds)} (target ≥ 0.90)")


if __name__ == "__main__":
    main()
