"""Given real worker processes and a report step that heartbeats a checkpoint after each
chunk, when the worker running it is killed with SIGKILL mid-report, then another worker
resumes the step from its last checkpoint within the heartbeat timeout plus a sweep, and
the report completes. Runs on Redis and on RabbitMQ (``brokers.py``)."""

from __future__ import annotations

import os
import signal as signals
import time
from collections.abc import Iterator

import dramatiq
import pytest
from sqlalchemy import select

import engine
from engine import clock, status, sweeper
from engine.models import Action, Attempt
from tests.integration.brokers import BrokerServer
from tests.integration.harness import WorkerGroup, fresh_database, wait_for, wait_until_ready, worker_env
from tests.integration.reports import HEARTBEAT_TIMEOUT, RETRY, Report, ReportsBase

#: How often the test sweeps, as a clock process would.
SWEEP_SECONDS = 1.0


@pytest.fixture(scope="module")
def database_url(broker_server: BrokerServer) -> Iterator[str]:
    with fresh_database(f"stepwise_reports_{broker_server.key}", ReportsBase.metadata) as url:
        yield url


def group(name: str, database_url: str, server: BrokerServer, tmp: pytest.TempPathFactory) -> WorkerGroup:
    return WorkerGroup(
        "tests.integration.reports",
        tmp.mktemp(name) / "workers.log",
        worker_env(database_url, server),
        server,
        processes=1,
        threads=2,
    )


def attempts() -> list[Attempt]:
    with engine.new_session() as session:
        return list(session.scalars(select(Attempt).order_by(Attempt.id)))


def test_a_killed_workers_heartbeating_step_resumes_on_another_worker_from_its_checkpoint(
    database_url: str,
    broker_server: BrokerServer,
    broker_client: dramatiq.Broker,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    # Given one worker running a 40-chunk report that checkpoints each chunk
    first = group("first", database_url, broker_server, tmp_path_factory)
    second = group("second", database_url, broker_server, tmp_path_factory)
    try:
        first.start()
        wait_until_ready([first])
        with engine.new_session() as session:
            report = Report(chunks=40)
            session.add(report)
            session.commit()
            engine.later(report, "generate")
            session.commit()
        wait_for(lambda: any((a.checkpoint or 0) >= 5 for a in attempts()), "5 chunks checkpointed", 60)

        # When that worker is killed mid-report, with another worker running
        second.start()
        wait_until_ready([second])
        assert first.process is not None
        os.killpg(first.process.pid, signals.SIGKILL)
        first.process.wait(timeout=10)
        killed_at = clock.now()
        [running] = attempts()
        assert running.ended_at is None
        checkpoint = running.checkpoint or 0

        # Then (sweeping as a clock process does) the next attempt starts within the
        # heartbeat timeout plus a sweep, from the checkpoint, and the report completes
        # (Timed by the resumed attempt's recorded start, not by this loop, whose polling
        # would add up to a sweep's interval to the figure.)
        resumed_after = None
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            found = attempts()
            if resumed_after is None and len(found) > 1:
                resumed_after = (found[1].started_at - killed_at).total_seconds()
            with engine.new_session() as session:
                done = session.scalars(select(Action.status)).one() == status.SUCCEEDED
            if done:
                break
            with engine.new_session() as session:
                sweeper.sweep(session)
            time.sleep(SWEEP_SECONDS)
        assert done, f"not done: {attempts()}\n{second.tail(40)}"
        assert resumed_after is not None
        # The heartbeat timeout, a sweep, the retry's interval, two messages to see (the
        # sweeper's check, then the retry) at the broker's polling interval, and slack for the
        # worker to take the next attempt up.
        budget = (
            HEARTBEAT_TIMEOUT.total_seconds()
            + SWEEP_SECONDS
            + RETRY.initial_interval.total_seconds()
            + 2 * broker_server.poll_seconds
            + 1.5
        )
        print(f"\nresumed {resumed_after:.1f} s after the kill (budget {budget:.1f} s)")
        assert resumed_after <= budget, f"resumed {resumed_after:.1f} s after the kill"
        lost, resumed = attempts()
        assert (lost.outcome, lost.error_class) == ("lost", "engine.errors.HeartbeatTimedOut")
        assert resumed.outcome == "succeeded"
        with engine.new_session() as session:
            action = session.scalars(select(Action)).one()
            result = engine.result_of(action)
            stored = session.get(Report, report.id)
            assert stored is not None and stored.processed_by is not None
        assert result["resumed_at"] >= checkpoint
        assert result["pid"] != first.process.pid
        # The killed attempt's writes never committed: the chunks from the checkpoint on are
        # the resuming worker's.
        assert stored.processed_by == [result["pid"]] * (40 - result["resumed_at"])
    finally:
        first.stop()
        second.stop()
