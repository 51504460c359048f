"""Seeding a PostgreSQL database with completed history, fast: one ``INSERT … SELECT`` over
``generate_series`` per table (``bench/seed_history.py``), with the secondary indexes
dropped during the load and rebuilt after, then ``VACUUM ANALYZE`` (``bench/seed_tables.py``).

Every seeded tree has the shape of the benchmark's workload (bench/workload.py): 5
actions, 6 steps, 5 invocations, 4 step-to-child links and 27 history events, in a
realistic mix of endings (91% succeeded, the rest failed, cancelled, timed out or
superseded; ``bench/seed_history.py`` has the details).

With ``live``, ``seed_live`` (``bench/seed_studio.py``) adds what the studio shows besides
history: lanes with an outbound action performing (awaiting approval) and pending ones
queued behind it, a tree of 1,000 nodes, and achievements.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import psycopg

from bench.common import say
from bench.seed_history import ACTIONS_PER_TREE, TRACEBACK, insert_history
from bench.seed_studio import seed_live
from bench.seed_tables import (
    TABLES,
    counts,
    drop_indexes,
    first_free,
    rebuild_indexes,
    reset_sequences,
    secondary_indexes,
    vacuum_analyze,
)

#: (root name, leaf name) pairs; the benchmark's own names by default.
WORKLOAD_NAMES: Sequence[tuple[str, str]] = (("grow", "leaf"),)
STUDIO_NAMES: Sequence[tuple[str, str]] = (
    ("deploy", "build"),
    ("deploy", "migrate"),
    ("provision", "allocate"),
    ("backup", "snapshot"),
    ("sync", "fetch"),
    ("invoice", "charge"),
    ("grow", "leaf"),
)


@dataclass
class Seeded:
    trees: int
    rows: dict[str, int]
    seconds: float

    def summary(self) -> str:
        """How long the seeding took and the rows it added, per table."""
        history = ", ".join(f"{t.removeprefix('stepwise_')} {n}" for t, n in self.rows.items() if n)
        return f"seeded in {self.seconds:.1f} s: {history}"


def seed(
    database_url: str,
    actions: int,
    names: Sequence[tuple[str, str]] = WORKLOAD_NAMES,
    days: float = 30.0,
    live: bool = False,
) -> Seeded:
    """Add ``actions`` completed actions (``actions // 5`` trees) spread over the last
    ``days`` days, after the rows already there; with ``live``, also ``seed_live``."""
    started = time.monotonic()
    trees = max(actions // ACTIONS_PER_TREE, 1)
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute("SET maintenance_work_mem = '256MB'")
        before = counts(connection)
        indexes = secondary_indexes(connection)
        with connection.transaction():
            connection.execute("SET LOCAL synchronous_commit = off")
            drop_indexes(connection, indexes)
            parameters = {
                "tree0": first_free(connection, "bench_trees"),
                "a0": first_free(connection, "stepwise_actions"),
                "s0": first_free(connection, "stepwise_steps"),
                "i0": first_free(connection, "stepwise_invocations"),
                "e0": first_free(connection, "stepwise_action_events"),
                "trees": trees,
                "roots": [root for root, _ in names],
                "leaves": [leaf for _, leaf in names],
                "names": len(names),
                "start": datetime.now(UTC).replace(tzinfo=None) - timedelta(days=days),
                "spacing": days * 86400 / trees,
                "traceback": TRACEBACK,
            }
            say(f"seeding {trees} trees ({trees * ACTIONS_PER_TREE} actions) ...")
            insert_history(connection, parameters)
            if live:
                reset_sequences(connection)
                seed_live(connection)
            rebuild_indexes(connection, indexes)
            reset_sequences(connection)
        vacuum_analyze(connection)
        after = counts(connection)
    added = {table: after[table] - before[table] for table in TABLES}
    seeded = Seeded(trees, added, time.monotonic() - started)
    say(f"seeded {seeded.rows} in {seeded.seconds:.1f} s")
    return seeded
