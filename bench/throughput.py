"""Engine throughput and overhead on PostgreSQL + Redis with ``dramatiq`` worker processes,
side by side with raw Dramatiq on the same broker and the same worker processes.

    .venv/bin/python bench/throughput.py [--trees 2000] [--processes 2] [--threads 64] [--rounds 3]

Prints trees/s, actions/s, CPU seconds per action of the workers and of PostgreSQL, the
SQL statements and transactions per action (counted in every worker process), the peak
RSS of one worker process, raw no-op messages/s, 5-stage no-op pipelines/s, and the ratio
of actions/s to raw messages/s. The engine's run and raw Dramatiq's alternate for
``--rounds`` rounds on the same worker processes, each round's ratio printed as it ends:
on a shared 2-CPU machine whose speed drifts by tens of percent within a minute, one
round's ratio moved between 0.12 and 0.32 for the same code in one hour. The table gives
the round with the median ratio. See bench/README.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import dramatiq

from bench import common, processes
from bench.common import say
from bench.engine_run import EngineRun, engine_rows, measure_trees
from bench.figures import errors_row, median_round, table
from bench.processes import Workers, running, worker_env

PIPELINE_STAGES = 5


# --- raw Dramatiq ---------------------------------------------------------------------


@dataclass
class RawRun:
    label: str
    units: int
    messages: int
    seconds: float
    worker_cpu: float

    @property
    def per_second(self) -> float:
        return self.units / self.seconds

    @property
    def cpu_per_message(self) -> float:
        return self.worker_cpu / self.messages


def drain(workers: Workers, broker: Any, enqueue: Any, label: str, units: int, messages: int) -> RawRun:
    """Fill the queue while the workers are paused, resume them, time until it is empty
    (Dramatiq's queue size counts messages taken but not yet acknowledged)."""
    from engine.broker import QUEUE

    workers.pause()
    try:
        enqueue()
    finally:
        cpu_before = workers.cpu_seconds()
        started = time.monotonic()
        workers.resume()
    while broker.do_qsize(QUEUE) > 0:
        if not workers.alive():
            raise SystemExit(f"the workers died:\n{workers.tail()}")
        time.sleep(0.002)
    seconds = time.monotonic() - started
    return RawRun(label, units, messages, seconds, workers.cpu_seconds() - cpu_before)


def measure_noops(workers: Workers, broker: Any, count: int) -> RawRun:
    from bench.workload import noop

    def enqueue() -> None:
        for _ in range(count):
            broker.enqueue(noop.message())

    return drain(workers, broker, enqueue, "no-op messages", count, count)


def measure_pipelines(workers: Workers, broker: Any, count: int) -> RawRun:
    from bench.workload import noop

    def enqueue() -> None:
        for _ in range(count):
            stages = [noop.message_with_options(pipe_ignore=True) for _ in range(PIPELINE_STAGES)]
            dramatiq.pipeline(stages, broker=broker).run()

    label = f"{PIPELINE_STAGES}-stage pipelines"
    return drain(workers, broker, enqueue, label, count, count * PIPELINE_STAGES)


# --- the script -----------------------------------------------------------------------


@dataclass
class Round:
    """One engine run and the raw no-op run after it, on the same worker processes."""

    number: int
    run: EngineRun
    raw: RawRun

    @property
    def ratio(self) -> float:
        return self.run.actions_per_second / self.raw.per_second

    @property
    def cpu_in_messages(self) -> float:
        return self.run.per_action(self.run.worker_cpu) / self.raw.cpu_per_message

    def summary(self) -> str:
        return (
            f"round {self.number}: {self.run.actions_per_second:.1f} actions/s, "
            f"{self.raw.per_second:.1f} raw messages/s, ratio {self.ratio:.3f}, worker CPU "
            f"{self.run.per_action(self.run.worker_cpu) * 1000:.2f} ms/action "
            f"({self.cpu_in_messages:.1f} msgs), PostgreSQL "
            f"{self.run.per_action(self.run.postgres_cpu.total) * 1000:.2f} ms/action"
        )


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trees", type=int, default=2000, help="trees in the measured run (default 2000)")
    processes.add_worker_arguments(parser)
    parser.add_argument(
        "--messages",
        type=int,
        help="raw no-op messages (default: 20 per tree; at 5 per tree, ~1.5 s of draining, "
        "the raw figure moved by ±25%% from run to run)",
    )
    parser.add_argument("--pipelines", type=int, help="raw 5-stage pipelines (default: 1 per tree)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="engine and raw no-op runs, alternating; the table gives the median round (default 3)",
    )
    parser.add_argument(
        "--warmup", type=int, default=50, help="trees (and 10 no-ops each) run first, unmeasured (default 50)"
    )
    parser.add_argument(
        "--engine-log",
        default="",
        help="level of the 'stepwise' logger in the workers (default: Dramatiq's INFO: errors only)",
    )
    return parser.parse_args(argv)


def warm_up(workers: Workers, database_url: str, broker: Any, trees: int) -> None:
    if trees > 0:
        measure_trees(workers, database_url, trees)
        measure_noops(workers, broker, trees * 10)


def main(argv: list[str] | None = None) -> None:
    args = arguments(argv)
    messages = args.messages or args.trees * 20
    pipelines = args.pipelines or args.trees
    say(common.machine())
    with common.fresh_database("stepwise_bench") as database_url, common.claimed_redis() as redis_url:
        common.create_schema(database_url)
        broker = common.use_redis_broker(redis_url)
        workers = Workers(args.processes, args.threads, database_url, redis_url, worker_env(args))
        with running(workers):
            errors_before = len(workers.errors())
            warm_up(workers, database_url, broker, args.warmup)
            rounds = []
            for n in range(1, args.rounds + 1):
                say(f"round {n}/{args.rounds}: engine, {args.trees} trees")
                run = measure_trees(workers, database_url, args.trees)
                say(f"round {n}/{args.rounds}: raw Dramatiq, {messages} no-op messages")
                raw = measure_noops(workers, broker, messages)
                rounds.append(Round(n, run, raw))
                say(rounds[-1].summary())
            say(f"raw Dramatiq: {pipelines} pipelines")
            pipes = measure_pipelines(workers, broker, pipelines)
            peak_kb = workers.peak_rss_kb()
            errors = workers.errors()[errors_before:]

    median = median_round(rounds)
    run, raw = median.run, median.raw
    rows = engine_rows(run)
    rows += [
        (
            "peak RSS of one worker",
            f"{peak_kb / 1024:.1f} MB",
            f"VmHWM, highest of the {args.processes} worker processes, whole run",
        ),
        (
            "raw no-op messages/s",
            f"{raw.per_second:.1f}",
            f"{raw.messages} messages in {raw.seconds:.2f} s; "
            f"worker CPU {raw.cpu_per_message * 1000:.3f} ms/msg",
        ),
        (
            "raw 5-stage pipelines/s",
            f"{pipes.per_second:.1f}",
            f"{pipes.per_second * PIPELINE_STAGES:.1f} messages/s; "
            f"worker CPU {pipes.cpu_per_message * 1000:.3f} ms/msg",
        ),
        (
            "actions/s ÷ raw messages/s",
            f"{median.ratio:.3f}",
            "target ≥ 0.33",
        ),
        (
            "worker CPU of an action",
            f"{median.cpu_in_messages:.1f} msgs",
            "in raw no-op messages' worth of worker CPU",
        ),
        errors_row(errors),
    ]
    if len(rounds) > 1:
        rows.append(
            (
                "rounds (ratio)",
                f"{len(rounds)}",
                ", ".join(f"{r.ratio:.3f}" for r in rounds) + f"; the table gives round {median.number}",
            )
        )
    table(
        f"Throughput: {args.processes} processes x {args.threads} threads, PostgreSQL + Redis "
        f"({common.machine()})",
        rows,
    )


if __name__ == "__main__":
    main()
