"""Given PostgreSQL, a broker (Redis, then RabbitMQ) and two ``dramatiq`` worker processes of
four threads each, when hundreds of deliveries queue at ten shared docks, each with a tree of
children, then every action ends, and no two actions of one lane ever perform at the same time.

The acceptance test of the engine (DESIGN invariants 1, 2, 3 and 4 under real concurrency).
Each action records when it performed (``tests/integration/intervals.py``), with PostgreSQL's
``clock_timestamp()`` as the one clock of every worker; overlaps are looked for afterwards,
in those intervals and in the engine's own ``started_at`` / ``completed_at``.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Iterator

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

import engine
from engine import status
from engine.models import Action, Invocation, Performance, Step
from tests.integration.brokers import BrokerServer
from tests.integration.deliveries import PROCESSES, THREADS, deliver, given_trucks
from tests.integration.harness import WorkerGroup, fresh_database
from tests.integration.intervals import overlapping_actions, overlapping_intervals, peak_parallelism
from tests.integration.progress import diagnosis, wait_until_settled
from tests.integration.workload import (
    ACTIONS_PER_DELIVERY,
    CRATES,
    DOCKS,
    STEPS_PER_DELIVERY,
    Crate,
    LaneInterval,
    Truck,
    WorkloadBase,
)

DELIVERIES = 500
BURST = 200
DEADLINE_SECONDS = 180.0


@pytest.fixture(scope="module")
def database_url(broker_server: BrokerServer) -> Iterator[str]:
    """A fresh PostgreSQL database with the engine's tables and the workload's, one per broker."""
    with fresh_database(f"stepwise_integration_{broker_server.key}", WorkloadBase.metadata) as url:
        yield url


# --- the workload ---------------------------------------------------------------------


def deliver_one_queued_per_dock(workers: WorkerGroup, truck_ids: list[int], deadline: float) -> None:
    """Invoke every delivery, sending the next one to a dock as soon as the previous one
    there has started performing: each dock always has one delivery performing and one
    queued. (Stepped's rule: a newer queued action supersedes the older queued ones of its
    lane, so a dock never holds more than one queued delivery that will perform.)"""
    with engine.new_session() as session:
        lines: dict[int, deque[Truck]] = {dock: deque() for dock in range(DOCKS)}
        for truck in session.scalars(select(Truck).where(Truck.id.in_(truck_ids)).order_by(Truck.id)):
            lines[truck.number % DOCKS].append(truck)
        queued: dict[int, int] = {}  # dock -> its delivery's invocation, not yet performing
        while any(lines.values()):
            if time.monotonic() > deadline:
                pytest.fail(
                    f"deliveries still waiting to be invoked at the deadline: {lines_left(lines)}\n"
                    f"{diagnosis(session, [workers])}"
                )
            started = set(
                session.scalars(
                    select(Invocation.id)
                    .join(Action, Action.id == Invocation.action_id)
                    .where(Invocation.id.in_(queued.values()), Action.status != status.PENDING)
                )
            )
            queued = {dock: invocation for dock, invocation in queued.items() if invocation not in started}
            sent = {}
            for dock, line in lines.items():
                if line and dock not in queued:
                    truck = line.popleft()
                    sent[dock] = engine.later(truck, "deliver", truck.number)
            session.commit()  # the admission messages go to the broker now
            queued.update({dock: invocation.id for dock, invocation in sent.items()})
            time.sleep(0.05)


def lines_left(lines: dict[int, deque[Truck]]) -> dict[int, int]:
    return {dock: len(line) for dock, line in lines.items() if line}


# --- what is checked afterwards -------------------------------------------------------


def assert_one_performing_per_lane_is_a_database_constraint(session: Session) -> None:
    definition = session.scalar(
        text(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'uq_stepwise_actions_one_performing_per_lane'"
        )
    )
    assert definition is not None, "the partial unique index on performing actions is missing"
    assert "CREATE UNIQUE INDEX" in definition
    assert "(concurrency_key)" in definition
    assert "WHERE ((status)::text = 'performing'::text)" in definition


def report(label: str, actions: int, seconds: float, peak: int | None) -> None:
    print(
        f"\n{label}: {actions} actions ended in {seconds:.1f} s ({actions / seconds:.0f} actions/s) on "
        f"{PROCESSES} processes x {THREADS} threads; at most {peak} actions performed at once"
    )


# --- the tests ------------------------------------------------------------------------


def test_every_delivery_ends_and_no_two_actions_of_a_lane_ever_perform_at_once(
    sa_engine: Engine, workers: WorkerGroup
) -> None:
    """The engine's acceptance: 500 root actions with children, on 10 shared concurrency keys,
    2 worker processes of 4 threads. Each dock gets its next delivery once the previous one
    there has started: a newer queued action supersedes older queued ones (spec §4.2), so
    this keeps every delivery performing (the burst test below covers superseding)."""
    # Given 500 trucks, each with two crates, queueing at ten shared docks
    truck_ids = given_trucks(DELIVERIES)
    errors_before = len(workers.errors())
    started = time.monotonic()
    deadline = started + DEADLINE_SECONDS

    # When each is delivered by the workers, every dock always holding a queued delivery
    deliver_one_queued_per_dock(workers, truck_ids, deadline)
    ended = wait_until_settled(workers, DELIVERIES, deadline)
    elapsed = time.monotonic() - started

    # Then every action of every tree succeeded, exactly once, and every lane is gone
    with engine.new_session() as session:
        expected = DELIVERIES * ACTIONS_PER_DELIVERY
        assert ended.actions == expected
        assert Counter(session.scalars(select(Action.status))) == {status.SUCCEEDED: expected}
        assert Counter(session.scalars(select(Action.name))) == {
            "deliver": DELIVERIES,
            "inspect": DELIVERIES,
            "stow": DELIVERIES * CRATES,
            "unload": DELIVERIES * CRATES,
        }
        assert session.scalar(select(func.count()).where(Action.root.is_(True))) == DELIVERIES
        assert Counter(session.scalars(select(Invocation.outcome))) == {"admitted": expected}
        assert session.scalar(select(func.count()).select_from(Performance)) == 0
        steps = session.execute(
            select(Step.status, Step.pending_actions_count, Step.completed_at.is_not(None))
        ).all()
        assert Counter(steps) == {(status.SUCCEEDED, 0, True): DELIVERIES * STEPS_PER_DELIVERY}
        trucks = Counter(session.execute(select(Truck.deliveries, Truck.inspections)).all())
        assert trucks == {(1, 1): DELIVERIES}
        crates = Counter(session.execute(select(Crate.stowed, Crate.unloaded)).all())
        assert crates == {(1, 1): DELIVERIES * CRATES}

        # and no two actions of one lane performed at the same time, in the intervals the
        # actions recorded and in the engine's own timestamps
        assert session.scalar(select(func.count()).select_from(LaneInterval)) == expected
        assert session.scalar(select(func.count()).where(LaneInterval.ended_at.is_(None))) == 0
        assert overlapping_intervals(session, LaneInterval) == []
        assert overlapping_actions(session) == []
        assert Counter(
            session.scalars(
                select(LaneInterval.concurrency_key).where(LaneInterval.concurrency_key.like("dock/%"))
            )
        ) == {f"dock/{dock}": DELIVERIES // DOCKS for dock in range(DOCKS)}
        assert_one_performing_per_lane_is_a_database_constraint(session)
        peak = peak_parallelism(session, LaneInterval)
        performers = set(session.scalars(select(LaneInterval.worker)))

    # and both worker processes, several threads each, did the work, some of it at once,
    # and logged no error or retry
    assert len({performer.split("/")[0] for performer in performers}) == PROCESSES
    assert len(performers) > PROCESSES
    assert peak is not None and peak > 1, "the workers never performed two actions at once"
    assert workers.running()
    assert workers.errors()[errors_before:] == []
    report("one queued delivery per dock", expected, elapsed, peak)


def test_a_burst_of_deliveries_supersedes_queued_ones_and_still_ends_every_action(
    sa_engine: Engine, workers: WorkerGroup
) -> None:
    """Every delivery is invoked at once: in each dock's lane the newer queued delivery
    supersedes the older ones (Stepped's rule, spec §4.2), under real contention. A root's
    invocation then points at the delivery that superseded it."""
    # Given 200 trucks queueing at ten shared docks
    truck_ids = given_trucks(BURST)
    errors_before = len(workers.errors())
    started = time.monotonic()

    # When all their deliveries are invoked in one transaction
    deliver(truck_ids)
    ended = wait_until_settled(workers, BURST, started + DEADLINE_SECONDS)
    elapsed = time.monotonic() - started

    with engine.new_session() as session:
        # Then each delivery was admitted, and ended succeeded or superseded
        deliveries = Counter(session.scalars(select(Action.status).where(Action.name == "deliver")))
        assert sum(deliveries.values()) == BURST
        assert set(deliveries) <= {status.SUCCEEDED, status.SUPERSEDED}
        succeeded = deliveries[status.SUCCEEDED]
        assert DOCKS <= succeeded < BURST

        # and every invocation ends with a delivery that succeeded
        final = session.scalars(
            select(Action.status).join(Invocation, Invocation.action_id == Action.id).where(Action.root)
        ).all()
        assert Counter(final) == {status.SUCCEEDED: BURST}

        # and only the deliveries that succeeded performed, each with its whole tree
        assert ended.actions == BURST + succeeded * (ACTIONS_PER_DELIVERY - 1)
        assert Counter(session.scalars(select(Action.status).where(~Action.root))) == {
            status.SUCCEEDED: succeeded * (ACTIONS_PER_DELIVERY - 1)
        }
        assert (
            session.scalar(
                select(func.count()).where(Action.status == status.SUPERSEDED, Action.started_at.is_not(None))
            )
            == 0
        )
        assert Counter(session.scalars(select(Truck.deliveries))) == {1: succeeded, 0: BURST - succeeded}
        assert session.scalar(select(func.count()).select_from(Performance)) == 0

        # and no two actions of one lane performed at the same time
        assert session.scalar(select(func.count()).select_from(LaneInterval)) == ended.actions - (
            BURST - succeeded
        )
        assert overlapping_intervals(session, LaneInterval) == []
        assert overlapping_actions(session) == []
        peak = peak_parallelism(session, LaneInterval)

    assert workers.errors()[errors_before:] == []
    report(f"burst of {BURST} ({succeeded} performed)", ended.actions, elapsed, peak)
