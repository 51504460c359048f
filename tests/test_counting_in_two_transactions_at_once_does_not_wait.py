"""Given two transactions on PostgreSQL that both complete actions (two worker processes'
batches, say), when each adds to the same counter, then neither waits for the other's
commit, and the metrics read the sum of both.

A counter is one row per (name, labels) that every completing batch adds to: its row lock
was held until the batch committed, so two worker processes' batches took turns on it
(``bench/throughput.py`` with ``auto_explain``: 54 waits of ~44 ms each in one run of 5,000
actions). Each database session now adds to a shard of its own (engine/counter.py).

Not a spec case: Stepped has no metrics.
"""

from __future__ import annotations

from contextlib import ExitStack

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

import engine
from engine import counter


@pytest.mark.postgresql_only
def test_two_transactions_add_to_one_counter_without_waiting_for_each_other(session: Session) -> None:
    with ExitStack() as stack:
        # Given a transaction that added to a counter and has not committed
        first, second = _two_sessions_on_different_shards(stack)
        counter.count(first, {"stepwise_retries_total": 2})

        # When a second one adds to it too, unwilling to wait for a lock
        second.execute(text("SET LOCAL lock_timeout = '200ms'"))
        counter.count(second, {"stepwise_retries_total": 3})
        second.commit()
        first.commit()

    # Then both were counted
    assert counter.totals(session)["stepwise_retries_total"] == [({}, 5)]


def _two_sessions_on_different_shards(stack: ExitStack) -> tuple[Session, Session]:
    """Two sessions whose connections add to different shards. Shards are chosen by the
    server process, so one of every few pairs would share one, and wait as before: the
    test opens sessions until the second's shard differs from the first's."""
    first = stack.enter_context(engine.new_session())
    shard = _shard(first)
    for _ in range(4 * counter.SHARDS):
        second = stack.enter_context(engine.new_session())
        if _shard(second) != shard:
            return first, second
    raise AssertionError("every connection was on the first one's shard")


def _shard(session: Session) -> int:
    return int(session.scalar(text(f"SELECT {counter.SHARD_OF_SESSION}")))  # type: ignore[arg-type]
