"""Given actions that retry, are recovered by the sweeper, complete and exchange signals,
when the metrics are rendered, then their counters count each event as it happens
(monotonic, so Prometheus's rate() is right): they survive pruning the history, and are
added to once per batch in the caller's transaction. Signal waits and the oldest wait are
gauges beside them.

Not a spec case: Stepped has no metrics (issue 3, section 5). The exposition is read by the
strict parser of tests/metrics_exposition.py.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import delete
from sqlalchemy.orm import Session

import engine
from engine import history, metrics, testing
from engine.models import Action, ActionEvent
from engine.retry import RetryPolicy
from tests.domain import Car
from tests.metrics_exposition import scrape


def test_retries_and_sweeper_recoveries_are_counted_as_they_happen_and_survive_pruning(
    session: Session, car: Car
) -> None:
    """Given an action whose three attempts all fail (two retries), and recovery events in
    the history (written here directly: the sweeper records ``recovered`` with cause
    "sweeper"), the counters count the retries and only the sweeper's recoveries; when the
    history is pruned, the counters keep their values (``rate()`` never sees them drop)."""
    # Given
    testing.freeze(testing.travel(timedelta()))
    engine.define(Car, "deliver", Car.breakdown, retry=RetryPolicy(max_attempts=3, jitter=0))
    with testing.handle_exceptions():
        action = engine.now(car, "deliver")
        for _ in range(3):
            testing.travel(timedelta(minutes=1))
            testing.drain()
    session.expire_all()
    assert session.get(Action, action.id).status == "failed"  # type: ignore[union-attr]
    with engine.new_session() as writer:
        delivered = writer.get(Action, action.id)
        history.record(writer, delivered, "recovered", cause=history.SWEEPER)
        history.record(writer, delivered, "recovered", cause=history.SWEEPER)
        history.record(writer, delivered, "recovered", cause=history.OPERATOR)
        writer.commit()
    with engine.new_session() as writer:  # a recovery rolled back is not counted
        history.record(writer, writer.get(Action, action.id), "recovered", cause=history.SWEEPER)
        writer.rollback()

    # When
    result = scrape()

    # Then
    assert result.value("stepwise_retries_total") == 2
    assert result.value("stepwise_sweeper_recoveries_total") == 2

    # And when the history is pruned, the counters stay where they were
    with engine.new_session() as pruner:
        pruner.execute(delete(ActionEvent))
        pruner.commit()
    pruned = scrape()
    assert pruned.value("stepwise_retries_total") == 2
    assert pruned.value("stepwise_sweeper_recoveries_total") == 2


def test_completions_are_counted_by_status_as_they_happen_and_survive_pruning(
    session: Session, car: Car
) -> None:
    """Given two actions that succeed and one that fails, the completions counter counts
    them by status in the transactions that completed them; deleting the actions and
    their history leaves it where it was."""
    # Given
    engine.define(Car, "deliver", Car.breakdown, retry=RetryPolicy(max_attempts=1, jitter=0))
    engine.now(car, "drive", 1)
    engine.now(car, "drive", 2)
    with testing.handle_exceptions():
        engine.now(car, "deliver")

    # Then
    counted = {frozenset({("status", "succeeded")}): 2, frozenset({("status", "failed")}): 1}
    assert scrape().series("stepwise_actions_completed_total") == counted

    # And when the history is pruned, the counter stays where it was
    with engine.new_session() as pruner:
        pruner.execute(delete(ActionEvent))
        pruner.commit()
    assert scrape().series("stepwise_actions_completed_total") == counted


def test_signals_sent_consumed_pending_and_the_oldest_wait(session: Session, car: Car) -> None:
    """Given two actions waiting for signals since 90 and 30 seconds, one signal consumed
    and one kept in an inbox, the signal counters and gauges say so."""
    # Given
    testing.freeze()
    gate = engine.define(Car, "gate", concurrency_key=lambda car, n: f"gate/{n}")

    @gate.step
    def hold(car: Car, step: engine.StepContext, n: int) -> None:
        step.wait_for("open")

    @gate.step
    def after(car: Car, step: engine.StepContext, n: int) -> None:
        step.wait_for("close")

    first = engine.now(car, "gate", 1)
    testing.travel(timedelta(seconds=60))
    second = engine.now(car, "gate", 2)
    testing.travel(timedelta(seconds=30))
    engine.signal(first, "open")  # consumed: the first gate now waits for "close"
    engine.signal(second, "close")  # kept: the second gate waits for "open"
    testing.drain()

    # When
    result = scrape()

    # Then
    assert result.value("stepwise_signals_sent_total") == 2
    assert result.value("stepwise_signals_consumed_total") == 1
    assert result.value("stepwise_signals_pending") == 1
    assert result.value("stepwise_signal_waits") == 2
    assert result.value("stepwise_oldest_signal_wait_seconds") == 30.0


def test_counters_are_added_to_once_per_batch_in_the_callers_transaction(session: Session) -> None:
    """``metrics.count`` adds to the counters in the caller's transaction (a rollback takes
    its increment back), in one statement, and refuses a counter nobody declared."""
    # When
    with engine.new_session() as batch:
        metrics.count(batch, {"stepwise_retries_total": 3, "stepwise_sweeper_recoveries_total": 0})
        batch.commit()
    with engine.new_session() as batch:
        metrics.count(batch, {"stepwise_retries_total": 5})
        batch.rollback()
    with engine.new_session() as batch:
        metrics.count(batch, {"stepwise_retries_total": 1, "stepwise_sweeper_recoveries_total": 1})
        batch.commit()

    with engine.new_session() as batch:
        metrics.count_by(batch, "stepwise_actions_completed_total", "status", {"succeeded": 40, "failed": 2})
        metrics.count_by(batch, "stepwise_actions_completed_total", "status", {"failed": 1, "cancelled": 0})
        batch.commit()

    # Then
    result = scrape()
    assert result.value("stepwise_retries_total") == 4
    assert result.value("stepwise_sweeper_recoveries_total") == 1
    assert result.series("stepwise_actions_completed_total") == {
        frozenset({("status", "succeeded")}): 40,
        frozenset({("status", "failed")}): 3,
    }
    with engine.new_session() as batch, pytest.raises(ValueError, match="declare them"):
        metrics.count(batch, {"stepwise_typo_total": 1})
