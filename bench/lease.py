"""What one step lease costs a worker thread: the lease as the engine takes it
(``engine.lease.take``: the statement through psycopg alone, the ORM objects made from its
row), against the same statement through the ORM, and the floor of any lease (a session,
BEGIN, one statement and ROLLBACK through psycopg alone).

    .venv/bin/python bench/lease.py [--rounds 12] [--leases 300]

Each way takes the lease of one open step of the throughput workload in a fresh session,
with its guessed actor, then rolls back, as a worker does for a body that wrote nothing.
The ways alternate in rounds; the table gives each one's median and lowest CPU per lease
(``time.process_time``, this thread) over the rounds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import select

from bench import common
from bench.figures import table


def run(url: str, rounds: int, leases: int) -> list[tuple[str, ...]]:
    import engine
    from bench.workload import Tree
    from engine import batch_admission, db, group_commit, lease, testing
    from engine.invocation import Invocation

    common.create_schema(url)
    sa_engine = engine.configure(url, pool_size=2)
    testing.setup()
    with db.transaction() as session:
        session.add(Tree(id=1))
        session.flush()
        engine.later(session.get(Tree, 1), "leaf", 1)
    with db.session() as session:
        invocation = session.scalars(select(Invocation.id)).one()
    _, (step_id,), _ = group_commit.run_together(batch_admission.admit_all, (invocation,))
    floor_sql = lease._reader(sa_engine.dialect, Tree).sql

    def engines_lease() -> None:
        with db.session() as session:
            assert lease.take(session, step_id, Tree, 1)[2] is not None
            session.rollback()

    def through_the_orm() -> None:
        with db.session() as session:
            parameters = {"step_id": step_id, "actor_key": 1}
            assert session.execute(lease.lease_with_actor(Tree), parameters).unique().one()[2] is not None
            session.rollback()

    def floor() -> None:
        with db.session() as session:
            connection = session.connection().connection.driver_connection
            assert connection.execute(floor_sql, {"step_id": step_id, "actor_key": 1}).fetchone()
            session.rollback()

    ways: dict[str, Callable[[], None]] = {
        "engine.lease.take": engines_lease,
        "the same statement through the ORM": through_the_orm,
        "floor: the statement through psycopg": floor,
    }
    times: dict[str, list[float]] = {name: [] for name in ways}
    for way in ways.values():
        for _ in range(leases // 2):
            way()
    for _ in range(rounds):
        for name, way in ways.items():
            before = time.process_time()
            for _ in range(leases):
                way()
            times[name].append((time.process_time() - before) / leases * 1e6)
    sa_engine.dispose()
    return [
        (name, f"{statistics.median(values):.0f} µs", f"lowest {min(values):.0f} µs")
        for name, values in times.items()
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--leases", type=int, default=300, help="leases per way in a round")
    options = parser.parse_args()
    with common.fresh_database("stepwise_lease") as url:
        rows = run(url, options.rounds, options.leases)
    table(f"CPU per step lease, one thread, median of {options.rounds} rounds ({common.machine()})", rows)


if __name__ == "__main__":
    main()
