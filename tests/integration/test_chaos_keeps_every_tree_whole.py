"""Given PostgreSQL, a broker (Redis, then RabbitMQ), three ``dramatiq`` worker processes and
the sweeper as a clock process, when a thousand orders run their three-level trees while a
random worker is killed with SIGKILL every few seconds and the broker restarts once (Redis
losing every message it held), then every tree ends, each action completed exactly once in
its history, no two actions of one lane performed at once, and no step counter is negative
or stranded.

Issue 3's acceptance (DESIGN invariants 1 to 4 under failure). The trees come from
``tests/integration/chaos_workload.py``: shared lanes at three levels, a flaky leaf that
retries, a ``step.wait`` timer, and outbound shipments that this test completes from
outside, as a carrier's webhook would, some of them as failed. What a kill or the broker's
restart loses is sent again by ``stepwise sweep --every 1 --grace 3``, as production's clock
process would. The chaos is driven by ``tests/integration/chaos.py``; this module checks
what must hold afterwards.

Restarting the broker disturbs anything else using it; on a shared machine point the test at
brokers of its own (the variables that ``brokers.py`` names), and at a PostgreSQL of its own
(``STEPWISE_TEST_POSTGRES``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import dramatiq
import pytest
from sqlalchemy import func, select, text

import engine
from engine import status
from engine.models import Action, ActionEvent, Invocation, Performance, Step
from tests.integration.brokers import BrokerServer
from tests.integration.chaos import DEADLINE_SECONDS, Chaos, given_orders, run_the_chaos, unleashed
from tests.integration.chaos_workload import (
    PARCELS_PER_ORDER,
    SHIPPED_EVERY,
    ChaosBase,
    ChaosInterval,
    Order,
    Parcel,
)
from tests.integration.harness import fresh_database
from tests.integration.intervals import overlapping_actions, overlapping_intervals

ORDERS = 1000

#: Per action: its status, whether it started, and how often its history says it started
#: and completed.
EVENTS_PER_ACTION = """
SELECT a.id, a.name, a.status, a.started_at IS NOT NULL,
       count(e.id) FILTER (WHERE e.event = 'started'),
       count(e.id) FILTER (WHERE e.event = 'completed')
FROM stepwise_actions a LEFT JOIN stepwise_action_events e ON e.action_id = a.id
GROUP BY a.id
"""


@pytest.fixture(scope="module")
def database_url(broker_server: BrokerServer) -> Iterator[str]:
    """A fresh PostgreSQL database with the engine's tables and the workload's, one per broker."""
    with fresh_database(f"stepwise_chaos_{broker_server.key}", ChaosBase.metadata) as url:
        yield url


@pytest.fixture
def chaos(
    database_url: str,
    broker_server: BrokerServer,
    broker_client: dramatiq.Broker,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Chaos]:
    """Three worker groups and the sweeper (``tests/integration/chaos.py``), stopped at the end."""
    with unleashed(database_url, broker_server, tmp_path_factory.mktemp("chaos")) as running:
        yield running


# --- the test -------------------------------------------------------------------------


@pytest.mark.timeout(DEADLINE_SECONDS + 180)
def test_every_tree_ends_whole_while_workers_are_killed_and_the_broker_restarts(chaos: Chaos) -> None:
    # Given a thousand orders of two parcels each, every third parcel shipped
    order_ids = given_orders(ORDERS)

    # When they are fulfilled by three workers, one killed with SIGKILL every few seconds,
    # with the broker restarted once, shipments completed from outside and the sweeper running
    seconds = run_the_chaos(chaos, order_ids)

    with engine.new_session() as session:
        chaos.report(seconds, session)

        # Then every tree ended: every root succeeded or failed, every action is terminal,
        # and no lane is left
        roots = Counter(session.scalars(select(Action.status).where(Action.root.is_(True))))
        assert sum(roots.values()) == ORDERS
        assert set(roots) <= {status.SUCCEEDED, status.FAILED}
        assert session.scalar(select(func.count()).where(Action.status.in_(status.INCOMPLETE))) == 0
        assert session.scalar(select(func.count()).select_from(Performance)) == 0

        # and the trees were three levels deep, with leaves in shared lanes
        names = Counter(session.scalars(select(Action.name)))
        assert names["fulfil"] == ORDERS
        assert names["pack"] == ORDERS * PARCELS_PER_ORDER
        assert names["label"] == ORDERS * PARCELS_PER_ORDER
        assert names["ship"] == len(range(0, ORDERS * PARCELS_PER_ORDER, SHIPPED_EVERY))

        # and each action's completion appears in its history exactly once (never for a
        # superseded one, which never started), as does its start
        wrong = [
            row
            for row in session.execute(text(EVENTS_PER_ACTION))
            if row[5] != (0 if row[2] == status.SUPERSEDED else 1) or row[4] != (1 if row[3] else 0)
        ]
        assert wrong[:20] == [], "(id, name, status, started, 'started' events, 'completed' events)"
        assert (
            session.scalar(
                select(func.count()).where(Action.status == status.SUPERSEDED, Action.started_at.is_not(None))
            )
            == 0
        )

        # and no two actions of one lane performed at once: in the intervals the actions
        # recorded and in the engine's own timestamps
        performed = session.scalar(select(func.count()).where(Action.started_at.is_not(None))) or 0
        assert session.scalar(select(func.count()).select_from(ChaosInterval)) == performed
        assert session.scalar(select(func.count()).where(ChaosInterval.ended_at.is_(None))) == 0
        assert overlapping_intervals(session, ChaosInterval) == []
        assert overlapping_actions(session) == []

        # and no step counter is negative or stranded: every step ran and concluded
        steps = Counter(
            tuple(row)
            for row in session.execute(
                select(
                    Step.status,
                    Step.pending_actions_count,
                    Step.performed_at.is_not(None),
                    Step.completed_at.is_not(None),
                )
            )
        )
        assert set(steps) <= {(status.STEP_SUCCEEDED, 0, True, True), (status.STEP_FAILED, 0, True, True)}
        stepless = select(Step.id).where(Step.action_id == Action.id).exists()
        assert session.scalar(select(func.count()).where(Action.started_at.is_not(None), ~stepless)) == 0

        # and every invocation was settled, and every child told its parent step that it ended
        assert session.scalar(select(func.count()).where(Invocation.settled_at.is_(None))) == 0
        assert (
            session.scalar(
                select(func.count()).where(
                    Invocation.parent_step_id.is_not(None), Invocation.concluded_at.is_(None)
                )
            )
            == 0
        )

        # and no step body's work was committed twice
        assert session.scalar(select(func.max(Order.closings))) == 1
        for column in (Parcel.sealed, Parcel.labelled, Parcel.handed_over):
            assert session.scalar(select(func.max(column))) == 1

        # and the chaos happened: workers were killed, the broker restarted, the sweeper
        # recovered lost work, flaky labels were retried, timers elapsed, shipments failed
        # and succeeded
        assert len(chaos.kills) >= 5
        assert chaos.broker_down_seconds is not None
        assert (session.scalar(select(func.count()).where(ActionEvent.event == "recovered")) or 0) > 0
        assert (session.scalar(select(func.count()).where(ActionEvent.event == "attempt_failed")) or 0) > 0
        assert (session.scalar(select(func.count()).where(Invocation.outcome == "waited")) or 0) > 0
        assert chaos.completions[status.SUCCEEDED] > 0 and chaos.completions[status.FAILED] > 0

    # and no worker group exited unless it was killed
    assert [(w.slot, code, log) for w in chaos.workers for code, log in w.exits] == []
