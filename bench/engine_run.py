"""The engine's measured run, shared by bench/throughput.py and bench/growth.py: trees of
the workload invoked while the worker processes are paused, then timed from their
resumption to the last completion, with what they cost the workers, PostgreSQL and Redis
(``EngineRun``), and its table rows (``engine_rows``)."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from bench import common, processes
from bench.common import max_id
from bench.figures import SqlCounts
from bench.processes import PostgresCpu, Workers


@dataclass
class EngineRun:
    """One measured run of ``trees`` trees: wall time from the workers' resumption to the
    last completion (the engine's own ``completed_at``), and what it cost."""

    trees: int
    actions: int
    steps: int
    statuses: Counter[str]
    seconds: float
    worker_cpu: float
    postgres_cpu: PostgresCpu
    redis_cpu: float
    sql: SqlCounts

    @property
    def trees_per_second(self) -> float:
        return self.trees / self.seconds

    @property
    def actions_per_second(self) -> float:
        return self.actions / self.seconds

    def per_action(self, value: float) -> float:
        return value / self.actions if self.actions else float("nan")

    @property
    def transactions_per_action(self) -> float:
        return self.per_action(self.sql.transactions)


def completed_actions(observer: psycopg.Connection[Any]) -> int:
    """Actions completed so far, whatever their status: the engine's counter (written in
    the transaction that completes them)."""
    from engine import counter

    row = observer.execute(
        "SELECT coalesce(sum(value), 0) FROM stepwise_counters WHERE name = %s", (counter.COMPLETED,)
    ).fetchone()
    return int(row[0]) if row else 0


def measure_trees(
    workers: Workers, database_url: str, count: int, deadline_seconds: float = 600.0
) -> EngineRun:
    """Invoke ``count`` trees while the workers are paused, resume them, and wait until
    every root has completed."""
    import engine
    from bench.workload import ACTIONS_PER_TREE, Tree
    from engine import clock, status

    observer = psycopg.connect(database_url, autocommit=True)
    try:
        first_action = max_id(observer, "stepwise_actions")
        first_step = max_id(observer, "stepwise_steps")
        with engine.new_session() as session:
            trees = [Tree() for _ in range(count)]
            session.add_all(trees)
            session.commit()
            sql_before = workers.settled_counts()
            workers.pause()
            try:
                invocations = [engine.later(tree, "grow") for tree in trees]
                session.commit()  # the admission messages go to Redis now
            except BaseException:
                workers.resume()
                raise
        low, high = invocations[0].id, invocations[-1].id
        # The observer's backend is the benchmark's: its CPU is left out of PostgreSQL's.
        observer_pid = observer.info.backend_pid
        completed_before = completed_actions(observer)
        cpu_before = workers.cpu_seconds()
        postgres_before = processes.postgres_cpu(common.database_name(database_url), exclude=observer_pid)
        redis_before = processes.redis_cpu()
        started = clock.now()
        workers.resume()
        deadline = time.monotonic() + deadline_seconds
        done_query = (
            "SELECT count(*) FROM stepwise_invocations i JOIN stepwise_actions a ON a.id = i.action_id "
            "WHERE i.id BETWEEN %s AND %s AND i.parent_step_id IS NULL AND a.status <> ALL(%s)"
        )
        incomplete = sorted(status.INCOMPLETE)
        while True:
            # Polled cheaply (one counter row) until every action may have completed, then
            # checked root by root: the full check costs PostgreSQL ~3 ms, 3% of a core if
            # it were polled every 0.1 s.
            ended_actions = completed_actions(observer) - completed_before
            if ended_actions >= count * ACTIONS_PER_TREE:
                row = observer.execute(done_query, (low, high, incomplete)).fetchone()
                if row is not None and row[0] >= count:
                    break
            if time.monotonic() > deadline or not workers.alive():
                raise SystemExit(
                    f"{ended_actions} of {count * ACTIONS_PER_TREE} actions completed; "
                    f"workers' log:\n{workers.tail()}"
                )
            time.sleep(0.05)
        cpu_after = workers.cpu_seconds()
        postgres_after = processes.postgres_cpu(common.database_name(database_url), exclude=observer_pid)
        redis_after = processes.redis_cpu()
        ended_row = observer.execute(
            "SELECT max(completed_at) FROM stepwise_actions WHERE id > %s", (first_action,)
        ).fetchone()
        ended: datetime = ended_row[0] if ended_row else clock.now()
        statuses = Counter(
            dict(
                observer.execute(
                    "SELECT status, count(*) FROM stepwise_actions WHERE id > %s GROUP BY status",
                    (first_action,),
                ).fetchall()
            )
        )
        steps_row = observer.execute(
            "SELECT count(*) FROM stepwise_steps WHERE id > %s", (first_step,)
        ).fetchone()
    finally:
        observer.close()
    sql_after = workers.settled_counts()
    return EngineRun(
        trees=count,
        actions=sum(statuses.values()),
        steps=int(steps_row[0]) if steps_row else 0,
        statuses=statuses,
        seconds=(ended - started).total_seconds(),
        worker_cpu=cpu_after - cpu_before,
        postgres_cpu=postgres_after - postgres_before,
        redis_cpu=redis_after - redis_before,
        sql=SqlCounts.between(sql_before, sql_after),
    )


def engine_rows(run: EngineRun, label: str = "") -> list[tuple[str, str, str]]:
    from bench.workload import ACTIONS_PER_TREE

    per = run.per_action
    succeeded = run.statuses.get("succeeded", 0)
    sql = run.sql
    return [
        (
            f"{label}trees",
            f"{run.trees}",
            f"{run.actions} actions, {run.steps} step rows in {run.seconds:.2f} s",
        ),
        (
            f"{label}actions ended",
            f"{succeeded}/{run.trees * ACTIONS_PER_TREE}",
            "succeeded" + ("" if succeeded == run.actions else f"; all statuses: {dict(run.statuses)}"),
        ),
        (f"{label}trees/s", f"{run.trees_per_second:.1f}", ""),
        (f"{label}actions/s", f"{run.actions_per_second:.1f}", ""),
        (f"{label}worker CPU s/action", f"{per(run.worker_cpu) * 1000:.2f} ms", "all worker processes"),
        (
            f"{label}garbage collection",
            f"{100 * sql.gc_seconds / run.worker_cpu:.1f}%" if run.worker_cpu else "-",
            f"of the workers' CPU: {sql.collections} collections, {sql.gc_seconds:.2f} s",
        ),
        (
            f"{label}PostgreSQL CPU s/action",
            f"{per(run.postgres_cpu.total) * 1000:.2f} ms",
            f"every postgres process; this database's backends alone: "
            f"{per(run.postgres_cpu.database) * 1000:.2f} ms",
        ),
        (f"{label}Redis CPU s/action", f"{per(run.redis_cpu) * 1000:.2f} ms", "redis-server"),
        (f"{label}SQL statements/action", f"{per(sql.total_statements):.1f}", sql.by_kind(run.actions)),
        (
            f"{label}transactions/action",
            f"{run.transactions_per_action:.2f}",
            f"commits {per(sql.commits):.2f} + rollbacks {per(sql.rollbacks):.2f}; "
            f"{per(sql.checkouts):.2f} pool checkouts (no pre-ping round trips)",
        ),
        (
            f"{label}transitions/batch",
            f"{sql.batched / sql.batches:.2f}" if sql.batches else "-",
            f"group commit: {sql.batches} batches, {sql.batched} transitions",
        ),
    ]
