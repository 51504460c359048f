"""Given a tree of 1,000 actions, the action page loads it in a bounded number of queries
(the same as for a tree of twenty), renders every node without recursion (a chain 150
deep included), and answers in under 300 ms (issue 5's budget for a 1,000-node tree).

Not a spec case: the studio is ours (issue 4, "usable with a tree of 1,000 nodes").
The tree is generated directly in the tables (action_page_scenarios.generated_tree):
running a thousand actions through the engine would only slow the test down.
"""

from __future__ import annotations

import time

import pytest
from flask import Flask
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from app.action import queries_tree
from app.database import db
from tests.studio.action_page_scenarios import counting_queries, generated_tree
from tests.studio.support import HTMX, StudioClient

#: The page's queries: the signed-in user, the action, the tree's actions, steps, edges and
#: unadmitted invocations, the failing leaf's traceback, the history and the errors, the
#: action's own inbox (its signals), and (a root's) the schedule tick that started it.
PAGE_QUERIES = 11
BUDGET_SECONDS = 0.300


@pytest.fixture
def app_engine(app: Flask) -> Engine:
    with app.app_context():
        return db.engine


def best_of(runs: int, fetch: object) -> float:
    """The fastest of ``runs`` requests: the server's cost, not a busy machine's hiccups."""
    assert callable(fetch)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        answer = fetch()
        times.append(time.perf_counter() - start)
        assert answer.status_code == 200
    return min(times)


def test_a_1000_node_tree_is_read_in_a_bounded_number_of_queries(
    viewer_client: StudioClient, session: Session, app_engine: Engine
) -> None:
    # Given a small tree and a tree of 1,000 actions, each with one failed leaf
    small = generated_tree(session, 20, fail_at=1)
    big = generated_tree(session, 1000, chain=150, fail_at=500)
    viewer_client.get(f"/actions/{small}")  # templates compiled, user loaded once

    # When each root's page is opened
    with counting_queries(app_engine) as small_queries:
        viewer_client.get(f"/actions/{small}")
    with counting_queries(app_engine) as big_queries:
        page = viewer_client.get(f"/actions/{big}")

    # Then both take the same few queries, one per table of the tree
    assert page.status_code == 200
    assert len(big_queries) == len(small_queries) == PAGE_QUERIES, big_queries.statements
    assert len([q for q in big_queries.statements if q.startswith("SELECT stepwise_steps.")]) == 1
    assert len(big_queries.touching("stepwise_step_actions")) == 1
    assert len(big_queries.touching("stepwise_invocations")) == 2  # the tree's, the schedule tick's
    assert len(big_queries.touching("stepwise_schedule_ticks")) == 1
    # And every node of the tree is on the page, the deepest of the chain too
    assert page.text.count('class="tn ') == 1000
    assert f">#{big + 999} deep149</a>" in page.text
    assert "Failure path" in page.text and "generated failure" in page.text


def test_loading_the_tree_takes_four_queries(session: Session, app: Flask, app_engine: Engine) -> None:
    root = generated_tree(session, 1000, chain=150)

    with app.app_context(), counting_queries(app_engine) as queries:
        tree = queries_tree.load_tree_of_root(db.session, root)

    assert tree is not None and len(tree) == 1000
    assert len(queries) == 4
    rows = tree.rows()
    assert sum(1 for r in rows if r.kind in ("open", "leaf")) == 1000
    assert max(r.depth for r in rows) == 2 * 150  # the chain, two rows (step, action) a level


def test_a_1000_node_tree_page_and_its_live_fragment_answer_within_300_ms(
    viewer_client: StudioClient, session: Session
) -> None:
    root = generated_tree(session, 1000, chain=150, fail_at=500)
    viewer_client.get(f"/actions/{root}")  # templates compiled

    page = best_of(5, lambda: viewer_client.get(f"/actions/{root}"))
    live = best_of(5, lambda: viewer_client.get(f"/actions/{root}/live", headers=HTMX))

    assert page < BUDGET_SECONDS, f"the page took {page * 1000:.0f} ms"
    assert live < BUDGET_SECONDS, f"the live fragment took {live * 1000:.0f} ms"
