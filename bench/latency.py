"""Latency: from ``later()`` to succeeded for a one-step action on an otherwise idle system,
one invocation at a time, on PostgreSQL with one ``dramatiq`` worker process, on Redis and on
RabbitMQ (one after the other, each with a database and a broker of its own).

    .venv/bin/python bench/latency.py [--broker redis|rabbitmq|both] [--runs 1000] [--threads 8]
                                      [--gap 0] [--worker-timeout MS]

Each run calls ``engine.later(tree, "leaf", n)`` and commits (the caller's transaction,
then the admission message to the broker), and waits for the action to succeed: PostgreSQL
notifies this process from a trigger on ``stepwise_actions`` (added to this benchmark's
database only), or, with ``--poll``, this process polls the row every millisecond.
Prints p50, p90, p95, p99 and the maximum, and the caller's share (``later()`` + commit),
per broker side by side. An idle Redis consumer waits on its queue's doorbell, rung by each
message sent (engine/redis_doorbell.py); RabbitMQ pushes each message to its consumer.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg

from bench import common
from bench.common import say
from bench.figures import percentile, table
from bench.processes import Workers, running, worker_env

BROKERS = {"redis": "Redis", "rabbitmq": "RabbitMQ"}

NOTIFY_TRIGGER = """
CREATE FUNCTION bench_notify_succeeded() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('bench_succeeded', NEW.arguments::text);
    RETURN NULL;
END $$;
CREATE TRIGGER bench_notify_succeeded AFTER UPDATE OF status ON stepwise_actions
FOR EACH ROW WHEN (NEW.root AND NEW.status = 'succeeded' AND OLD.status <> 'succeeded')
EXECUTE FUNCTION bench_notify_succeeded();
"""


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--broker",
        choices=[*BROKERS, "both"],
        default="both",
        help="the broker to measure on (default both: Redis, then RabbitMQ)",
    )
    parser.add_argument(
        "--runs", type=int, default=1000, help="measured invocations per broker (default 1000)"
    )
    parser.add_argument(
        "--warmup", type=int, default=20, help="invocations run first, unmeasured (default 20)"
    )
    parser.add_argument("--threads", type=int, default=8, help="threads of the worker process (default 8)")
    parser.add_argument(
        "--gap", type=float, default=0.0, help="milliseconds of idleness between invocations (default 0)"
    )
    parser.add_argument(
        "--worker-timeout",
        type=int,
        help="Dramatiq's worker timeout in ms (env dramatiq_worker_timeout; default 1000): the longest "
        "wait of an idle Redis consumer on its doorbell before it fetches again (RabbitMQ pushes "
        "messages: there it only paces delayed messages)",
    )
    parser.add_argument("--poll", action="store_true", help="poll the row every 1 ms instead of LISTEN")
    parser.add_argument("--engine-log", default="", help="level of the 'stepwise' logger in the worker")
    return parser.parse_args(argv)


class Waiter:
    """Waits until the root action invoked with arguments ``[n]`` has succeeded."""

    def __init__(self, database_url: str, poll: bool) -> None:
        self.poll = poll
        self.connection = psycopg.connect(database_url, autocommit=True)
        if not poll:
            self.connection.execute("LISTEN bench_succeeded")

    def wait(self, n: int, invocation_id: int, seconds: float = 30.0) -> None:
        deadline = time.monotonic() + seconds
        if self.poll:
            query = (
                "SELECT a.status FROM stepwise_invocations i JOIN stepwise_actions a ON a.id = i.action_id "
                "WHERE i.id = %s"
            )
            while time.monotonic() < deadline:
                row = self.connection.execute(query, (invocation_id,)).fetchone()
                if row is not None and row[0] == "succeeded":
                    return
                time.sleep(0.001)
        else:
            expected = f"[{n}]"
            while time.monotonic() < deadline:
                for notice in self.connection.notifies(timeout=max(deadline - time.monotonic(), 0.0)):
                    if notice.payload == expected:
                        return
        raise SystemExit(f"invocation {invocation_id} did not succeed within {seconds:.0f} s")

    def close(self) -> None:
        self.connection.close()


def measure(
    session: Any, tree: Any, waiter: Waiter, first: int, runs: int, gap: float
) -> list[tuple[float, float]]:
    """(total, caller's share) in seconds for each of ``runs`` sequential invocations."""
    import engine

    timings = []
    for n in range(first, first + runs):
        if gap:
            time.sleep(gap / 1000)
        started = time.perf_counter()
        invocation = engine.later(tree, "leaf", n)
        session.commit()  # the caller's transaction, then the message to the broker
        committed = time.perf_counter()
        waiter.wait(n, invocation.id)
        ended = time.perf_counter()
        timings.append((ended - started, committed - started))
    return timings


@dataclass
class Measured:
    """One broker's runs: (total, caller's share) in ms each, and the workers' log errors."""

    broker: str
    totals: list[float]
    callers: list[float]
    errors: list[str]


def broker_url(name: str) -> AbstractContextManager[str]:
    """A broker of this run's own: an empty Redis database, or a fresh RabbitMQ virtual host."""
    return common.claimed_redis() if name == "redis" else common.fresh_vhost()


def measure_on(name: str, args: argparse.Namespace) -> Measured:
    env = worker_env(args)
    if args.worker_timeout is not None:
        env["dramatiq_worker_timeout"] = str(args.worker_timeout)
    say(f"--- {BROKERS[name]}: {common.machine()}")
    with common.fresh_database("stepwise_latency") as database_url, broker_url(name) as url:
        common.create_schema(database_url)
        if not args.poll:
            with psycopg.connect(database_url, autocommit=True) as connection:
                connection.execute(NOTIFY_TRIGGER)
        client = common.use_redis_broker(url) if name == "redis" else common.use_rabbitmq_broker(url)
        import engine
        from bench.workload import Tree

        workers = Workers(1, args.threads, database_url, url, env)
        try:
            with running(workers), engine.new_session() as session:
                tree = Tree()
                session.add(tree)
                session.commit()
                waiter = Waiter(database_url, args.poll)
                try:
                    measure(session, tree, waiter, 0, args.warmup, args.gap)
                    say(f"{args.runs} invocations, one at a time")
                    timings = measure(session, tree, waiter, args.warmup, args.runs, args.gap)
                finally:
                    waiter.close()
                errors = workers.errors()
        finally:
            client.close()
    return Measured(
        BROKERS[name],
        [total * 1000 for total, _ in timings],
        [caller * 1000 for _, caller in timings],
        errors,
    )


def rows(results: list[Measured], args: argparse.Namespace) -> Iterator[tuple[str, ...]]:
    def each(figure: Callable[[Measured], str]) -> list[str]:
        return [figure(result) for result in results]

    def ms(p: float) -> list[str]:
        return each(lambda r: f"{percentile(r.totals, p):.1f} ms")

    waiting = "polling" if args.poll else "LISTEN"
    yield (
        "runs",
        *each(lambda r: f"{len(r.totals)}"),
        f"one at a time, {args.gap:g} ms apart; waiting by {waiting}",
    )
    yield ("p50", *ms(50), "target < 10 ms")
    yield ("p90", *ms(90), "")
    yield ("p95", *ms(95), "")
    yield ("p99", *ms(99), "target < 40 ms")
    yield ("max", *each(lambda r: f"{max(r.totals):.1f} ms"), "")
    yield ("mean", *each(lambda r: f"{statistics.fmean(r.totals):.1f} ms"), "")
    yield (
        "caller's share p50",
        *each(lambda r: f"{percentile(r.callers, 50):.1f} ms"),
        "later() + commit + message to the broker",
    )
    timeout = f"{args.worker_timeout} ms" if args.worker_timeout is not None else "1000 ms"
    yield (
        "worker timeout",
        *each(lambda r: timeout),
        "Redis: an idle consumer's longest wait on its doorbell; RabbitMQ pushes each message"
        + ("" if args.worker_timeout is not None else " (Dramatiq's default)"),
    )
    first = next((error for result in results for error in result.errors), "")
    yield ("worker log errors/warnings", *each(lambda r: f"{len(r.errors)}"), first[:100])


def main(argv: list[str] | None = None) -> None:
    args = arguments(argv)
    names = list(BROKERS) if args.broker == "both" else [args.broker]
    results = [measure_on(name, args) for name in names]
    table(
        f"Latency: later() to succeeded, one-step action, 1 worker process x {args.threads} threads "
        f"({common.machine()})",
        list(rows(results, args)),
        header=("", *(result.broker for result in results)),
        values=len(results),
    )


if __name__ == "__main__":
    main()
