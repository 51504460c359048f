"""What the studio shows besides history, seeded for ``bench/studio.py``: lanes with an
outbound action performing (awaiting approval) and pending ones queued behind it, a tree
of 1,000 nodes, and achievements.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from bench.seed_tables import first_free

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
            concurrency_key, checksum_key, current_step_index, started_at,
            created_at, updated_at)
        SELECT id, 'Tree', (%(tree0)s + g)::text, 'approve', json_build_array(q),
               CASE WHEN q = 0 THEN 'performing' ELSE 'pending' END, true, true,
               lane_key, 'Tree/' || (%(tree0)s + g) || '/approve', 0,
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
