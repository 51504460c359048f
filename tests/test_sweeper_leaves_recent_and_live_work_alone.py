"""Given lost work, within the grace period the sweeper sends nothing; work whose message is
on its way, and work a live worker holds (its row lock, its lease), is left alone; and a
sweep sends at most its limit of each kind, leaving the rest to the next sweep.

Not a spec case: Stepped has no crash recovery (DESIGN invariant 4; issue 3, "Nothing is
lost"). How work is lost is in sweeper_scenarios.py; what the sweeper sends again is in
test_sweeper_recovers_lost_work.py.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

import engine
from engine import testing
from engine.models import Invocation, Step
from engine.sweeper import GRACE, SweepReport
from tests.domain import Car
from tests.sweeper_scenarios import (
    SECOND,
    define_outbound_move,
    define_park,
    frozen,
    lose_messages,
    open_without_running,
    recovered,
    sweep,
)

__all__ = ["frozen"]  # the autouse fixture: pytest finds it in this module


def test_within_the_grace_period_the_sweeper_sends_nothing(session: Session, car: Car) -> None:
    # Given one of each kind of lost work: an admission, a wait, a timeout and a step
    define_park(1)
    define_outbound_move()
    engine.later(car, "honk")
    session.commit()
    engine.now(car, "park")
    engine.now(car, "change_location", "Paris")
    open_without_running(session, car, "drive", 1)
    lose_messages()

    # When the sweeper runs just before the grace period ends for the oldest of them
    testing.travel(GRACE - SECOND)
    report = sweep()

    # Then it sent nothing and recorded nothing
    assert report == SweepReport()
    assert testing.enqueued() == []
    assert recovered(session) == []

    # and once the grace period is over for each, it sends each again, once
    testing.travel(timedelta(seconds=5) + 2 * SECOND)
    assert sweep() == SweepReport(admit=1, wait_over=1, timeout=1, perform_step=1)
    assert sorted(m.job for m in testing.enqueued()) == [
        "stepwise.admit",
        "stepwise.perform_step",
        "stepwise.timeout",
        "stepwise.wait_over",
    ]
    testing.drain()
    assert len(recovered(session)) == 4

    # and once everything concluded, nothing is left to sweep, however late
    testing.travel(timedelta(days=1))
    assert sweep() == SweepReport()
    assert sweep(grace=timedelta()) == SweepReport()


def test_work_whose_message_is_on_its_way_is_left_alone(session: Session, car: Car) -> None:
    """Nothing was lost: every message is delivered; the sweeper never needs to step in."""
    define_park(10)
    engine.later(car, "park")
    session.commit()
    testing.travel(timedelta(seconds=10))
    testing.drain()
    testing.travel(GRACE + SECOND)
    assert sweep() == SweepReport()
    assert recovered(session) == []


def test_a_sweep_sends_at_most_its_limit_of_each_kind(session: Session, car: Car) -> None:
    # Given three lost admissions
    for miles in (1, 2, 3):
        engine.later(car, "drive", miles)
    session.commit()
    lose_messages()
    testing.travel(GRACE + SECOND)

    # When the sweeper runs with a limit of two
    assert sweep(limit=2) == SweepReport(admit=2)
    assert testing.drain() == 2

    # Then the oldest two went first, and the third goes at the next sweep
    session.refresh(car)
    assert car.mileage == 3
    assert sweep(limit=2) == SweepReport(admit=1)
    testing.drain()
    session.refresh(car)
    assert car.mileage == 6


@pytest.mark.postgresql_only
def test_a_step_held_by_a_live_worker_is_skipped(session: Session, car: Car, backend: Engine) -> None:
    """A live worker holds its step's row lock while the body runs (its lease): the sweeper
    skips the row instead of waiting for it or sending it again."""
    # Given a step opened long ago whose body a live worker is running
    open_without_running(session, car, "drive", 2)
    step_id = session.scalars(select(Step.id)).one()
    testing.travel(GRACE + SECOND)
    with engine.new_session() as worker:
        worker.scalars(select(Step).where(Step.id == step_id).with_for_update()).one()

        # When the sweeper runs
        report = sweep()

        # Then it skipped the step
        assert report == SweepReport()
        worker.rollback()

    # and once the worker is gone (its lease released), the step is sent again
    assert sweep() == SweepReport(perform_step=1)
    testing.drain()
    session.refresh(car)
    assert car.mileage == 2


@pytest.mark.postgresql_only
def test_an_invocation_held_by_a_live_worker_is_skipped(session: Session, car: Car) -> None:
    """A live worker holds the invocation's row lock while it admits it (its lease)."""
    # Given a lost admission that a live worker is admitting right now
    invocation = engine.later(car, "drive", 2)
    session.commit()
    lose_messages()
    testing.travel(GRACE + SECOND)
    with engine.new_session() as worker:
        worker.scalars(select(Invocation).where(Invocation.id == invocation.id).with_for_update()).one()

        # When the sweeper runs
        report = sweep()

        # Then it skipped the invocation
        assert report == SweepReport()
        worker.rollback()

    # and once the worker is gone, the invocation is sent again
    assert sweep() == SweepReport(admit=1)
