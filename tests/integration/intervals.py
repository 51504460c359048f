"""Lane intervals: when each action of a workload performed, recorded by the worker that
performed it, and the queries that look afterwards for two actions of one lane at once.

The workload modules use it in worker processes (it imports neither pytest nor the test
harness). Intervals use PostgreSQL's ``clock_timestamp()``: one clock for every process.
"""

from __future__ import annotations

import faulthandler
import os
import random
import signal
import threading
import time
from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Row, String, func, insert, text, update
from sqlalchemy.orm import Mapped, Session, mapped_column, object_session

import engine
from engine import StepContext, db


def configure_worker() -> None:
    """In a worker process (``DATABASE_URL`` set): a pool of 10 connections for its threads
    unless ``STEPWISE_POOL_SIZE`` names another (a bound, as for ``stepwise worker``), and
    ``kill -USR1 <worker pid>`` writes every thread's stack to the worker's log."""
    if os.environ.get("DATABASE_URL"):
        os.environ.setdefault(db.POOL_SIZE_VARIABLE, "10")
        engine.configure()
        faulthandler.register(signal.SIGUSR1, all_threads=True)


class LaneIntervalColumns:
    """When one action performed: from its first step body to its after-callback, which
    runs in the transaction that completes it and hands its lane over. A body whose
    transaction rolled back (an error, a kill) leaves no row."""

    id: Mapped[int] = mapped_column(primary_key=True)
    # Unique: a first step body that committed twice would fail here, and its action with it.
    action_id: Mapped[int] = mapped_column(BigInteger, unique=True)
    concurrency_key: Mapped[str] = mapped_column(String(255), index=True)
    started_at: Mapped[datetime]
    ended_at: Mapped[datetime | None]
    #: "pid/thread name" of the worker that ran the first step body.
    worker: Mapped[str] = mapped_column(String(100))


class IntervalRecorder:
    """Opens an action's interval from its first step body and closes it from an
    after-callback, in one workload's interval table."""

    def __init__(self, model: Any, pause_seconds: float) -> None:
        self.model = model
        #: The longest pause a step body takes after opening its interval, to widen any overlap.
        self.pause_seconds = pause_seconds

    def opened(self, step: StepContext) -> None:
        step.session.execute(
            insert(self.model).values(
                action_id=step.action.id,
                concurrency_key=step.action.concurrency_key,
                started_at=func.clock_timestamp(),
                worker=f"{os.getpid()}/{threading.current_thread().name}",
            )
        )
        time.sleep(random.uniform(0, self.pause_seconds))

    def closed(self, actor: Any, action: engine.Action, *arguments: Any) -> None:
        session = object_session(action)
        assert session is not None
        session.execute(
            update(self.model)
            .where(self.model.action_id == action.id)
            .values(ended_at=func.clock_timestamp())
        )

    def close_after(self, *definitions: tuple[type, str]) -> None:
        """Close the interval when each of these ``(actor class, action name)`` completes."""
        for actor_class, name in definitions:
            engine.definition(actor_class, name).after(self.closed)


# --- the checks, in the test process ---------------------------------------------------

OVERLAPPING_INTERVALS = """
SELECT a.concurrency_key, a.action_id, a.started_at, a.ended_at, b.action_id, b.started_at, b.ended_at
FROM {table} a
JOIN {table} b
  ON a.concurrency_key = b.concurrency_key AND a.id < b.id
 AND a.started_at < b.ended_at AND b.started_at < a.ended_at
LIMIT 20
"""

OVERLAPPING_ACTIONS = """
SELECT a.concurrency_key, a.id, a.started_at, a.completed_at, b.id, b.started_at, b.completed_at
FROM stepwise_actions a
JOIN stepwise_actions b
  ON a.concurrency_key = b.concurrency_key AND a.id < b.id
 AND a.started_at < b.completed_at AND b.started_at < a.completed_at
WHERE a.started_at IS NOT NULL AND b.started_at IS NOT NULL
LIMIT 20
"""

PEAK_PARALLELISM = """
SELECT max(running) FROM (
  SELECT sum(change) OVER (ORDER BY at, change) AS running FROM (
    SELECT started_at AS at, 1 AS change FROM {table}
    UNION ALL SELECT ended_at, -1 FROM {table}
  ) edges
) timeline
"""


def overlapping_intervals(session: Session, model: Any) -> list[Row[Any]]:
    """Pairs of one lane whose recorded intervals overlap (at most 20)."""
    return list(session.execute(text(OVERLAPPING_INTERVALS.format(table=model.__tablename__))).all())


def overlapping_actions(session: Session) -> list[Row[Any]]:
    """Pairs of one lane that overlap in the engine's own ``started_at`` / ``completed_at``."""
    return list(session.execute(text(OVERLAPPING_ACTIONS)).all())


def peak_parallelism(session: Session, model: Any) -> int | None:
    """The most intervals open at one moment."""
    peak: int | None = session.scalar(text(PEAK_PARALLELISM.format(table=model.__tablename__)))
    return peak
