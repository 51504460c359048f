"""Workflows: a 5-step workflow passing results along, and signal round trips, on
PostgreSQL with ``dramatiq`` worker processes, on Redis and on RabbitMQ.

    .venv/bin/python bench/workflows.py [--broker redis|rabbitmq|both] [--runs 500]
                                        [--batch 200] [--processes 2] [--threads 64]

- **Pipeline, one at a time**: ``later(tree, "pipeline", n)`` (five steps, each returning
  what the one before returned plus one) until it succeeded, p50/p99.
- **Pipeline, drained**: ``--batch`` pipelines invoked in one transaction, the time until
  the last succeeded: workflows and steps per second.
- **Signal round trip**: a ``gate`` waits for "go"; from ``engine.signal`` (sent to the
  workers, as the webhook and the CLI do) until its next step finished and the action
  succeeded, one at a time, p50/p99.

Completion is observed by a PostgreSQL notification from a trigger on ``stepwise_actions``
(added to this benchmark's database only), as ``bench/latency.py`` does.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg

from bench import common, processes
from bench.common import say
from bench.figures import percentile, table
from bench.latency import BROKERS, NOTIFY_TRIGGER, Waiter, broker_url
from bench.processes import Workers, running, worker_env

PIPELINE_STEPS = 5


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--broker", choices=[*BROKERS, "both"], default="both")
    parser.add_argument("--runs", type=int, default=500, help="measured runs of each one-at-a-time figure")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument(
        "--batch", type=int, default=200, help="pipelines invoked at once for the drained figure"
    )
    processes.add_worker_arguments(parser)
    parser.add_argument("--engine-log", default="", help="level of the 'stepwise' logger in the workers")
    return parser.parse_args(argv)


@dataclass
class Measured:
    broker: str
    pipeline_ms: list[float]
    drained_seconds: float
    batch: int
    signal_ms: list[float]
    errors: list[str]


def invocation_action(connection: psycopg.Connection[Any], invocation_id: int, seconds: float = 30.0) -> int:
    """The action an invocation became (polled: admission is asynchronous)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        row = connection.execute(
            "SELECT action_id FROM stepwise_invocations WHERE id = %s AND action_id IS NOT NULL",
            (invocation_id,),
        ).fetchone()
        if row is not None:
            return int(row[0])
        time.sleep(0.001)
    raise SystemExit(f"invocation {invocation_id} was not admitted within {seconds:.0f} s")


def waiting(connection: psycopg.Connection[Any], action_id: int, seconds: float = 30.0) -> None:
    """Until the action's step waits for its signal."""
    query = (
        "SELECT 1 FROM stepwise_invocations i JOIN stepwise_steps s ON s.id = i.parent_step_id "
        "WHERE s.action_id = %s AND i.name = 'signal' AND i.concluded_at IS NULL"
    )
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if connection.execute(query, (action_id,)).fetchone() is not None:
            return
        time.sleep(0.001)
    raise SystemExit(f"action {action_id} never waited for its signal")


def all_succeeded(waiter: Waiter, expected: set[str], seconds: float = 300.0) -> None:
    """Until a notification came for each of ``expected`` (the actions' arguments)."""
    left = set(expected)
    deadline = time.monotonic() + seconds
    while left and time.monotonic() < deadline:
        for notice in waiter.connection.notifies(timeout=max(deadline - time.monotonic(), 0.0), stop_after=1):
            left.discard(notice.payload)
    if left:
        raise SystemExit(f"{len(left)} of {len(expected)} pipelines did not succeed within {seconds:.0f} s")


def measure_on(name: str, args: argparse.Namespace) -> Measured:
    say(f"--- {BROKERS[name]}: {common.machine()}")
    with common.fresh_database("stepwise_workflows") as database_url, broker_url(name) as url:
        common.create_schema(database_url)
        with psycopg.connect(database_url, autocommit=True) as connection:
            connection.execute(NOTIFY_TRIGGER)
        client = common.use_redis_broker(url) if name == "redis" else common.use_rabbitmq_broker(url)
        import engine
        from bench.workload import Tree

        workers = Workers(args.processes, args.threads, database_url, url, worker_env(args))
        try:
            with running(workers), engine.new_session() as session:
                tree = Tree()
                session.add(tree)
                session.commit()
                waiter = Waiter(database_url, poll=False)
                poller = psycopg.connect(database_url, autocommit=True)
                try:
                    n = 0

                    def pipeline_once() -> float:
                        nonlocal n
                        n += 1
                        started = time.perf_counter()
                        invocation = engine.later(tree, "pipeline", n)
                        session.commit()
                        waiter.wait(n, invocation.id)
                        return (time.perf_counter() - started) * 1000

                    for _ in range(args.warmup):
                        pipeline_once()
                    say(f"{args.runs} pipelines, one at a time")
                    pipeline_ms = [pipeline_once() for _ in range(args.runs)]

                    say(f"{args.batch} pipelines at once")
                    first = n + 1
                    started = time.perf_counter()
                    for k in range(args.batch):
                        engine.later(tree, "pipeline", first + k)
                    session.commit()
                    all_succeeded(waiter, {f"[{first + k}]" for k in range(args.batch)})
                    drained = time.perf_counter() - started
                    n = first + args.batch

                    def signal_once() -> float:
                        nonlocal n
                        n += 1
                        invocation = engine.later(tree, "gate", n)
                        session.commit()
                        action_id = invocation_action(poller, invocation.id)
                        waiting(poller, action_id)
                        started = time.perf_counter()
                        engine.signal(action_id, "go", n, run_here=False)
                        waiter.wait(n, invocation.id)
                        return (time.perf_counter() - started) * 1000

                    for _ in range(args.warmup):
                        signal_once()
                    say(f"{args.runs} signal round trips, one at a time")
                    signal_ms = [signal_once() for _ in range(args.runs)]
                finally:
                    waiter.close()
                    poller.close()
                errors = workers.errors()
        finally:
            client.close()
    return Measured(BROKERS[name], pipeline_ms, drained, args.batch, signal_ms, errors)


def rows(results: list[Measured]) -> Iterator[tuple[str, ...]]:
    def each(figure: Any) -> list[str]:
        return [figure(result) for result in results]

    yield (
        "pipeline p50",
        *each(lambda r: f"{percentile(r.pipeline_ms, 50):.1f} ms"),
        "5 steps, results passed along",
    )
    yield ("pipeline p99", *each(lambda r: f"{percentile(r.pipeline_ms, 99):.1f} ms"), "one at a time")
    yield (
        "pipelines drained",
        *each(lambda r: f"{r.batch / r.drained_seconds:.1f}/s"),
        "invoked in one transaction, until the last succeeded",
    )
    yield ("steps drained", *each(lambda r: f"{r.batch * PIPELINE_STEPS / r.drained_seconds:.0f}/s"), "")
    yield (
        "signal round trip p50",
        *each(lambda r: f"{percentile(r.signal_ms, 50):.1f} ms"),
        "signal() to succeeded",
    )
    yield ("signal round trip p99", *each(lambda r: f"{percentile(r.signal_ms, 99):.1f} ms"), "one at a time")
    first = next((error for result in results for error in result.errors), "")
    yield ("worker log errors/warnings", *each(lambda r: f"{len(r.errors)}"), first[:100])


def main(argv: list[str] | None = None) -> None:
    args = arguments(argv)
    names = list(BROKERS) if args.broker == "both" else [args.broker]
    results = [measure_on(name, args) for name in names]
    table(
        f"Workflows: {args.processes} worker processes x {args.threads} threads ({common.machine()})",
        list(rows(results)),
        header=("", *(result.broker for result in results)),
        values=len(results),
    )


if __name__ == "__main__":
    main()
