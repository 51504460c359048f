"""The SQL that seeds completed history: one ``INSERT … SELECT`` over ``generate_series``
per table, for every tree of a seeding at once (``bench/seed.py`` runs it).

Every seeded tree has the shape of the benchmark's workload (bench/workload.py), with the
rows the engine writes for it (checked against a real run): 5 actions, 6 steps, 5
invocations, 4 step-to-child links and 27 history events. Trees end in a realistic mix:

    91% succeeded                                  (every action succeeded)
     5% failed      the last leaf raised; its step, the root's second step and the root failed
     2% cancelled   an operator cancelled the root and its last leaf
     1% timed out   the root timed out; its leaves succeeded
     1% superseded  the first leaf was superseded by the second, queued in its lane
"""

from __future__ import annotations

from typing import Any

import psycopg

ACTIONS_PER_TREE = 5
STEPS_PER_TREE = 6
EVENTS_PER_TREE = 30  # id slots per tree; 27 or 28 are used
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/srv/app/engine/config.py", line 25, in run_user_code\n'
    "    fn(*args)\n"
    '  File "/srv/app/models.py", line 88, in leaf\n'
    '    raise RuntimeError("the leaf broke")\n'
    "RuntimeError: the leaf broke\n"
)


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
    superseded_by_id, error_class, error_message, error_traceback,
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


def insert_history(connection: psycopg.Connection[Any], parameters: dict[str, Any]) -> None:
    """The trees' actor rows, then their actions, steps, invocations, links and history."""
    connection.execute(TREE_ACTORS, parameters)
    for statement in (ACTIONS, STEPS, INVOCATIONS, STEP_ACTIONS):
        connection.execute("WITH " + TREES_CTE + statement, parameters)
    connection.execute("WITH " + TREES_CTE + EVENTS.replace("{template}", _template()), parameters)
