"""Seeding a PostgreSQL database with completed history, fast: one ``INSERT … SELECT`` over
``generate_series`` per table, with the secondary indexes dropped during the load and
rebuilt after, then ``VACUUM ANALYZE``.

Every seeded tree has the shape of the benchmark's workload (bench/workload.py), with the
rows the engine writes for it (checked against a real run): 5 actions, 6 steps, 5
invocations, 4 step-to-child links and 27 history events. Trees end in a realistic mix:

    91% succeeded                                  (every action succeeded)
     5% failed      the last leaf raised; its step, the root's second step and the root failed
     2% cancelled   an operator cancelled the root and its last leaf
     1% timed out   the root timed out; its leaves succeeded
     1% superseded  the first leaf was superseded by the second, queued in its lane

``seed_live`` adds what the studio shows besides history: lanes with an outbound action
performing (awaiting approval) and pending ones queued behind it, a tree of 1,000 nodes,
and achievements.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from bench.common import say

ACTIONS_PER_TREE = 5
STEPS_PER_TREE = 6
EVENTS_PER_TREE = 30  # id slots per tree; 27 or 28 are used
TABLES = (
    "stepwise_actions",
    "stepwise_steps",
    "stepwise_invocations",
    "stepwise_step_actions",
    "stepwise_action_events",
    "stepwise_performances",
    "stepwise_achievements",
    "bench_trees",
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
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/srv/app/engine/config.py", line 25, in run_user_code\n'
    "    fn(*args)\n"
    '  File "/srv/app/models.py", line 88, in leaf\n'
    '    raise RuntimeError("the leaf broke")\n'
    "RuntimeError: the leaf broke\n"
)


@dataclass
class Seeded:
    trees: int
    rows: dict[str, int]
    seconds: float


def first_free(connection: psycopg.Connection[Any], table: str) -> int:
    row = connection.execute(f"SELECT coalesce(max(id), 0) + 1 FROM {table}").fetchone()
    assert row is not None
    return int(row[0])


def secondary_indexes(connection: psycopg.Connection[Any]) -> list[tuple[str, str]]:
    """The indexes not backing a constraint (primary keys and unique constraints stay)."""
    rows = connection.execute(
        "SELECT indexname, indexdef FROM pg_indexes i WHERE schemaname = current_schema() "
        "AND tablename = ANY(%s) "
        "AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conname = i.indexname)",
        (list(TABLES),),
    ).fetchall()
    return [(str(name), str(definition)) for name, definition in rows]


# One row per history event of a tree: (slot, action k, event, step slot or NULL, whether
# it names the invocation). Leaves k = 1..3 run in the root's first step, k = 4 in its second.
def _leaf_events(k: int, first: int) -> list[tuple[int, int, str, int | None, bool]]:
    step = k + 1
    return [
        (first, k, "admitted", None, True),
        (first + 1, k, "started", None, False),
        (first + 2, k, "step_started", step, False),
        (first + 3, k, "step_concluded", step, False),
        (first + 4, k, "completed", None, False),
    ]


EVENT_TEMPLATE: list[tuple[int, int, str, int | None, bool]] = [
    (0, 0, "admitted", None, True),
    (1, 0, "started", None, False),
    (2, 0, "step_started", 0, False),
    *_leaf_events(1, 3),
    *_leaf_events(2, 8),
    *_leaf_events(3, 13),
    (18, 0, "step_concluded", 0, False),
    (19, 0, "step_started", 1, False),
    *_leaf_events(4, 20),
    (25, 0, "step_concluded", 1, False),
    (26, 0, "completed", None, False),
    (27, 4, "step_failed", 5, False),
]

# The trees of one seeding: n (0-based), kind, names, time; and per action k its status.
TREES_CTE = """
trees AS (
    SELECT g AS n,
           %(tree0)s + g AS tree,
           CASE WHEN g %% 100 < 91 THEN 'ok' WHEN g %% 100 < 96 THEN 'failed'
                WHEN g %% 100 < 98 THEN 'cancelled' WHEN g %% 100 < 99 THEN 'timed_out'
                ELSE 'superseded' END AS kind,
           (%(roots)s::text[])[1 + g %% %(names)s] AS root_name,
           (%(leaves)s::text[])[1 + g %% %(names)s] AS leaf_name,
           %(start)s::timestamp + make_interval(secs => g * %(spacing)s) AS at
    FROM generate_series(0, %(trees)s - 1) AS g
),
nodes AS (
    SELECT trees.*, k,
           %(a0)s + n * 5 AS root_id,
           %(a0)s + n * 5 + k AS id,
           CASE WHEN k = 0 THEN root_name ELSE leaf_name END AS name,
           CASE
             WHEN kind = 'failed' AND k IN (0, 4) THEN 'failed'
             WHEN kind = 'cancelled' AND k IN (0, 4) THEN 'cancelled'
             WHEN kind = 'timed_out' AND k = 0 THEN 'timed_out'
             WHEN kind = 'superseded' AND k = 1 THEN 'superseded'
             ELSE 'succeeded' END AS status
    FROM trees CROSS JOIN generate_series(0, 4) AS k
)
"""

ACTIONS = """
INSERT INTO stepwise_actions (
    id, actor_type, actor_id, name, arguments, status, root, root_id, outbound, job,
    concurrency_key, checksum_key, checksum, current_step_index, timeout_seconds, deadline_at,
    performance_id, superseded_by_id, error_class, error_message, error_traceback,
    started_at, completed_at, created_at, updated_at)
SELECT id, 'Tree', tree::text, name,
       CASE WHEN k = 0 THEN '[]'::json ELSE json_build_array(k) END,
       status, k = 0, CASE WHEN k = 0 THEN NULL ELSE root_id END, false, NULL,
       CASE WHEN k = 0 THEN 'Tree/' || tree || '/' || name
            WHEN kind = 'superseded' AND k = 1 THEN 'Tree/' || tree || '/' || name || '/2'
            ELSE 'Tree/' || tree || '/' || name || '/' || k END,
       'Tree/' || tree || '/' || name, NULL,
       CASE WHEN k = 0 THEN 1 ELSE 0 END,
       CASE WHEN kind = 'timed_out' AND k = 0 THEN 60 END,
       CASE WHEN kind = 'timed_out' AND k = 0 THEN at + interval '60 seconds' END,
       NULL,
       CASE WHEN kind = 'superseded' AND k = 1 THEN id + 1 END,
       CASE WHEN kind = 'failed' AND k = 4 THEN 'builtins.RuntimeError' END,
       CASE WHEN kind = 'failed' AND k = 4 THEN 'the leaf broke' END,
       CASE WHEN kind = 'failed' AND k = 4 THEN %(traceback)s END,
       CASE WHEN kind = 'superseded' AND k = 1 THEN NULL ELSE at + make_interval(secs => k * 0.02) END,
       at + make_interval(secs => CASE WHEN k = 0 THEN 0.2 ELSE k * 0.02 + 0.01 END),
       at + make_interval(secs => k * 0.02 - 0.003),
       at + make_interval(secs => CASE WHEN k = 0 THEN 0.2 ELSE k * 0.02 + 0.01 END)
FROM nodes
"""

STEPS = """
INSERT INTO stepwise_steps (
    id, action_id, definition_index, status, pending_actions_count, unsuccessful_actions_count,
    attempt, retry_at, started_at, performed_at, completed_at, created_at, updated_at)
SELECT %(s0)s + n * 6 + j,
       %(a0)s + n * 5 + CASE WHEN j < 2 THEN 0 ELSE j - 1 END,
       CASE WHEN j = 1 THEN 1 ELSE 0 END,
       CASE WHEN kind IN ('failed', 'cancelled') AND j IN (1, 5) THEN 'failed' ELSE 'succeeded' END,
       0,
       CASE WHEN kind IN ('failed', 'cancelled') AND j = 1 THEN 1 ELSE 0 END,
       1, NULL,
       at + make_interval(secs => j * 0.02),
       at + make_interval(secs => j * 0.02 + 0.004),
       at + make_interval(secs => j * 0.02 + 0.008),
       at + make_interval(secs => j * 0.02),
       at + make_interval(secs => j * 0.02 + 0.008)
FROM trees CROSS JOIN generate_series(0, 5) AS j
WHERE NOT (kind = 'superseded' AND j = 2)
"""

INVOCATIONS = """
INSERT INTO stepwise_invocations (
    id, kind, actor_type, actor_id, name, arguments, parent_step_id, action_id, outcome,
    created_at, settled_at, concluded_at, succeeded)
SELECT %(i0)s + n * 5 + k, 'action', 'Tree', tree::text, name,
       CASE WHEN k = 0 THEN '[]'::json ELSE json_build_array(k) END,
       CASE WHEN k = 0 THEN NULL WHEN k < 4 THEN %(s0)s + n * 6 ELSE %(s0)s + n * 6 + 1 END,
       CASE WHEN kind = 'superseded' AND k = 1 THEN id + 1 ELSE id END,
       'admitted',
       at + make_interval(secs => k * 0.02 - 0.01),
       at + make_interval(secs => k * 0.02),
       CASE WHEN k = 0 THEN NULL ELSE at + make_interval(secs => k * 0.02 + 0.01) END,
       CASE WHEN k = 0 THEN NULL ELSE status IN ('succeeded', 'superseded') END
FROM nodes
"""

STEP_ACTIONS = """
INSERT INTO stepwise_step_actions (parent_step_id, child_action_id)
SELECT CASE WHEN k < 4 THEN %(s0)s + n * 6 ELSE %(s0)s + n * 6 + 1 END, id
FROM nodes WHERE k > 0
"""

EVENTS = """
INSERT INTO stepwise_action_events (
    id, action_id, root_id, invocation_id, step_id, event, cause, by, at, data)
SELECT %(e0)s + n * 30 + t.slot,
       nodes.id, root_id,
       CASE WHEN t.names_invocation THEN %(i0)s + n * 5 + nodes.k END,
       CASE WHEN t.step IS NOT NULL THEN %(s0)s + n * 6 + t.step END,
       CASE WHEN kind = 'superseded' AND nodes.k = 1 AND t.event = 'admitted' THEN 'queued'
            WHEN kind = 'superseded' AND nodes.k = 1 AND t.event = 'completed' THEN 'superseded'
            ELSE t.event END,
       CASE WHEN t.event = 'completed' AND nodes.status = 'cancelled' THEN 'operator'
            WHEN t.event = 'completed' AND nodes.status = 'timed_out' THEN 'timeout'
            ELSE 'worker' END,
       CASE WHEN t.event = 'completed' AND nodes.status = 'cancelled' THEN 'olga' END,
       at + make_interval(secs => t.slot * 0.007),
       (CASE
          WHEN t.event = 'admitted' THEN json_build_object('lane', 'Tree/' || tree || '/' || name)
          WHEN t.event = 'step_started'
               THEN json_build_object('index', CASE WHEN t.step = 1 THEN 1 ELSE 0 END)
          WHEN t.event = 'step_concluded' THEN json_build_object('status',
               CASE WHEN kind IN ('failed', 'cancelled') AND t.step IN (1, 5) THEN 'failed'
                    ELSE 'succeeded' END)
          WHEN t.event = 'completed' AND kind = 'superseded' AND nodes.k = 1
               THEN json_build_object('by_action_id', nodes.id + 1)
          WHEN t.event = 'completed' THEN json_build_object('status', nodes.status)
          WHEN t.event = 'step_failed' THEN json_build_object(
               'error_class', 'builtins.RuntimeError', 'error_message', 'the leaf broke',
               'traceback', %(traceback)s::text)
          ELSE '{}'::json END)
FROM nodes JOIN (VALUES {template}) AS t(slot, k, event, step, names_invocation) ON t.k = nodes.k
WHERE NOT (t.event = 'step_failed' AND kind <> 'failed')
  AND NOT (kind = 'superseded' AND nodes.k = 1 AND t.event IN ('started', 'step_started', 'step_concluded'))
"""

TREE_ACTORS = """
INSERT INTO bench_trees (id) SELECT %(tree0)s + g FROM generate_series(0, %(trees)s - 1) AS g
"""


def _template() -> str:
    values = []
    for slot, k, event, step, names_invocation in EVENT_TEMPLATE:
        values.append(
            f"({slot}, {k}, '{event}', {'NULL::int' if step is None else step}, {names_invocation})"
        )
    return ", ".join(values)


def reset_sequences(connection: psycopg.Connection[Any]) -> None:
    for table in TABLES:
        if table == "stepwise_step_actions":
            continue
        connection.execute(
            f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
            f"greatest((SELECT max(id) FROM {table}), 1))"
        )


def counts(connection: psycopg.Connection[Any]) -> dict[str, int]:
    result = {}
    for table in TABLES:
        row = connection.execute(f"SELECT count(*) FROM {table}").fetchone()
        result[table] = int(row[0]) if row else 0
    return result


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
            for name, _ in indexes:
                connection.execute(f'DROP INDEX "{name}"')
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
            connection.execute(TREE_ACTORS, parameters)
            for statement in (ACTIONS, STEPS, INVOCATIONS, STEP_ACTIONS):
                connection.execute("WITH " + TREES_CTE + statement, parameters)
            connection.execute("WITH " + TREES_CTE + EVENTS.replace("{template}", _template()), parameters)
            if live:
                reset_sequences(connection)
                seed_live(connection)
            say(f"rebuilding {len(indexes)} indexes ...")
            for _, definition in indexes:
                connection.execute(definition)
            reset_sequences(connection)
        say("VACUUM ANALYZE ...")
        for table in TABLES:
            connection.execute(f"VACUUM ANALYZE {table}")
        after = counts(connection)
    added = {table: after[table] - before[table] for table in TABLES}
    return Seeded(trees, added, time.monotonic() - started)


# --- what the studio shows besides history ----------------------------------------------

LANES = 1000
PENDING_PER_LANE = 2
#: A tree of 1 root, 9 children and 110 grandchildren under each: 1,000 nodes.
BIG_TREE_CHILDREN = 9
BIG_TREE_GRANDCHILDREN = 110


def seed_live(connection: psycopg.Connection[Any]) -> None:
    """Lanes with an outbound action awaiting approval and two queued behind it; a tree of
    1,000 nodes; an achievement for every tenth seeded tree."""
    lanes = """
    WITH lanes AS (
        SELECT g, %(a0)s + g * 3 AS head, %(p0)s + g AS lane, 'Approval/' || g AS lane_key,
               (now() at time zone 'utc') - make_interval(mins => g %% 600) AS at
        FROM generate_series(0, %(lanes)s - 1) AS g
    ), queued AS (
        SELECT lanes.*, q, head + q AS id FROM lanes CROSS JOIN generate_series(0, %(queue)s) AS q
    ), performances AS (
        INSERT INTO stepwise_performances (id, concurrency_key, action_id, outbound_complete_key,
                                           created_at, updated_at)
        SELECT lane, lane_key, head, 'Tree/' || (%(tree0)s + g) || '/approve', at, at FROM lanes
    ), actions AS (
        INSERT INTO stepwise_actions (id, actor_type, actor_id, name, arguments, status, root, outbound,
            concurrency_key, checksum_key, current_step_index, performance_id, started_at,
            created_at, updated_at)
        SELECT id, 'Tree', (%(tree0)s + g)::text, 'approve', json_build_array(q),
               CASE WHEN q = 0 THEN 'performing' ELSE 'pending' END, true, true,
               lane_key, 'Tree/' || (%(tree0)s + g) || '/approve', 0, lane,
               CASE WHEN q = 0 THEN at END, at + make_interval(secs => q), at + make_interval(secs => q)
        FROM queued
    ), steps AS (
        INSERT INTO stepwise_steps (action_id, definition_index, status, pending_actions_count,
            unsuccessful_actions_count, attempt, started_at, performed_at, completed_at,
            created_at, updated_at)
        SELECT head, 0, 'succeeded', 0, 0, 1, at, at, at, at, at FROM lanes
    ), invocations AS (
        INSERT INTO stepwise_invocations (kind, actor_type, actor_id, name, arguments, action_id,
            outcome, created_at, settled_at)
        SELECT 'action', 'Tree', (%(tree0)s + g)::text, 'approve', json_build_array(q), id,
               'admitted', at, at FROM queued
    ), events AS (
        INSERT INTO stepwise_action_events (action_id, root_id, event, cause, at, data)
        SELECT id, id, CASE WHEN q = 0 THEN 'admitted' ELSE 'queued' END, 'worker', at,
               json_build_object('lane', lane_key)
        FROM queued
    )
    INSERT INTO bench_trees (id) SELECT %(tree0)s + g FROM lanes
    """
    parameters = {
        "a0": first_free(connection, "stepwise_actions"),
        "p0": first_free(connection, "stepwise_performances"),
        "tree0": first_free(connection, "bench_trees"),
        "lanes": LANES,
        "queue": PENDING_PER_LANE,
    }
    connection.execute(lanes, parameters)
    seed_big_tree(connection)
    connection.execute(
        """
        INSERT INTO stepwise_achievements (checksum_key, checksum, action_id, created_at, updated_at)
        SELECT checksum_key, md5(id::text) || md5(checksum_key), id, completed_at, completed_at
        FROM stepwise_actions
        WHERE root AND status = 'succeeded' AND id % 50 = 1
        ON CONFLICT (checksum_key) DO NOTHING
        """
    )


def seed_big_tree(connection: psycopg.Connection[Any]) -> int:
    """One succeeded tree of 1,000 actions (a root, 9 children, 110 grandchildren under
    each), with its steps, links, invocations and history; returns the root's id."""
    tree = first_free(connection, "bench_trees")
    connection.execute("INSERT INTO bench_trees (id) VALUES (%s)", (tree,))
    root = first_free(connection, "stepwise_actions")
    first_step = first_free(connection, "stepwise_steps")
    # (action id, name, parent step id) in tree order; step ids follow action ids.
    nodes: list[tuple[int, str, int | None]] = [(root, "rollout", None)]
    for child in range(BIG_TREE_CHILDREN):
        child_id = root + 1 + child * (BIG_TREE_GRANDCHILDREN + 1)
        nodes.append((child_id, "region", first_step))
        child_step = first_step + (child_id - root)
        nodes.extend((child_id + 1 + g, "host", child_step) for g in range(BIG_TREE_GRANDCHILDREN))
    at = datetime.now(UTC).replace(tzinfo=None) - timedelta(hours=1)
    done = at + timedelta(minutes=10)
    with connection.cursor() as cursor:
        with cursor.copy(
            "COPY stepwise_actions (id, actor_type, actor_id, name, arguments, status, root, root_id, "
            "outbound, concurrency_key, checksum_key, current_step_index, started_at, completed_at, "
            "created_at, updated_at) FROM STDIN"
        ) as copy:
            for action_id, name, parent in nodes:
                key = f"Tree/{tree}/{name}/{action_id}"
                root_id = None if parent is None else root
                row = (action_id, "Tree", str(tree), name, "[]", "succeeded", parent is None, root_id)
                copy.write_row((*row, False, key, key, 0, at, done, at, done))
        with cursor.copy(
            "COPY stepwise_steps (id, action_id, definition_index, status, pending_actions_count, "
            "unsuccessful_actions_count, attempt, started_at, performed_at, completed_at, created_at, "
            "updated_at) FROM STDIN"
        ) as copy:
            for action_id, _name, _parent in nodes:
                step_id = first_step + (action_id - root)
                copy.write_row((step_id, action_id, 0, "succeeded", 0, 0, 1, at, at, done, at, done))
        with cursor.copy("COPY stepwise_step_actions (parent_step_id, child_action_id) FROM STDIN") as copy:
            for action_id, _name, parent in nodes:
                if parent is not None:
                    copy.write_row((parent, action_id))
        with cursor.copy(
            "COPY stepwise_invocations (kind, actor_type, actor_id, name, arguments, parent_step_id, "
            "action_id, outcome, created_at, settled_at, concluded_at, succeeded) FROM STDIN"
        ) as copy:
            for action_id, name, parent in nodes:
                concluded = None if parent is None else done
                succeeded = None if parent is None else True
                invocation = ("action", "Tree", str(tree), name, "[]", parent, action_id, "admitted", at, at)
                copy.write_row((*invocation, concluded, succeeded))
        with cursor.copy(
            "COPY stepwise_action_events (action_id, root_id, event, cause, at, data) FROM STDIN"
        ) as copy:
            for action_id, _name, _parent in nodes:
                copy.write_row((action_id, root, "started", "worker", at, "{}"))
                copy.write_row((action_id, root, "completed", "worker", done, '{"status": "succeeded"}'))
    return root
