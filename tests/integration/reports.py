"""A report workload for real workers: one long step that processes chunks, heartbeating a
checkpoint after each, so a test can kill its worker mid-report and watch another worker
resume from the checkpoint.

Workers import it: ``dramatiq engine.jobs tests.integration.reports``.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

from sqlalchemy import JSON
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

import engine
from engine import Actor, RetryPolicy, StepContext
from tests.integration.intervals import configure_worker

#: How long each chunk takes, the heartbeat timeout of the report's step, and its retries
#: (the next attempt is due at once: the test measures how soon a lost one is found).
CHUNK_SECONDS = 0.25
HEARTBEAT_TIMEOUT = timedelta(seconds=3)
RETRY = RetryPolicy(max_attempts=3, initial_interval=timedelta(milliseconds=100), jitter=0)

configure_worker()


class ReportsBase(DeclarativeBase):
    pass


class Report(Actor, ReportsBase):
    # The demo (app/demo/__init__.py) has a Report too: two classes under one actor type are refused.
    __actor_type__ = "HeartbeatReport"
    __tablename__ = "workload_reports"

    id: Mapped[int] = mapped_column(primary_key=True)
    chunks: Mapped[int] = mapped_column(default=40)
    #: Which worker process processed each chunk (only the committed attempt's).
    processed_by: Mapped[list[int] | None] = mapped_column(JSON)

    @engine.action(heartbeat_timeout=HEARTBEAT_TIMEOUT, retry=RETRY)
    def generate(self, step: StepContext) -> dict[str, int]:
        start = step.checkpoint or 0
        done = list(self.processed_by or [])[:start]
        for chunk in range(start, self.chunks):
            time.sleep(CHUNK_SECONDS)
            done.append(os.getpid())
            step.heartbeat(progress=(chunk + 1) / self.chunks, checkpoint=chunk + 1)
        self.processed_by = done
        return {"resumed_at": start, "pid": os.getpid()}
