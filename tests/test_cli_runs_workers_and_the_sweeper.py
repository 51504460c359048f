"""Given the ``stepwise`` command, ``stepwise sweep`` sends lost work again (once, or every
SECONDS, surviving a failed round) and ``stepwise worker`` starts Dramatiq's workers on the
engine's jobs and the application's modules.

Not a spec case: Stepped runs in Rails' own processes (issue 3, "Nothing is lost"). The
commands run in this process (``engine.cli.main``), on the test's stub broker.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import dramatiq
import pytest
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

import engine
from engine import cli, db, sweeper, testing
from engine.sweeper import GRACE, SweepReport
from tests.domain import Car

T = datetime(2025, 1, 2, 3, 4, 5)


Stepwise = Callable[..., int]


@pytest.fixture
def stepwise(backend: Engine, monkeypatch: pytest.MonkeyPatch) -> Stepwise:
    """Runs ``stepwise ARGS --database-url <the test's database>`` in this process, then
    points the engine back at the test's database (the command configures its own). A
    broker URL is in the environment: required, never dialled (the stub broker stays)."""
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")
    testing.freeze(T)

    def run(*args: str) -> int:
        try:
            return cli.main([*args, "--database-url", backend.url.render_as_string(hide_password=False)])
        finally:
            engine.configure(backend)

    return run


def lost_admission(session: Session, car: Car) -> None:
    engine.later(car, "drive", 5)
    session.commit()
    dramatiq.get_broker().flush_all()
    testing.travel(GRACE + timedelta(seconds=1))


def test_sweep_sends_lost_work_again_once(
    session: Session, car: Car, stepwise: Stepwise, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an admission whose message was lost, longer ago than the grace period
    lost_admission(session, car)

    # When the sweep command runs
    status = stepwise("sweep")

    # Then it sent the admission again and said so
    assert status == 0
    assert "sent again: 1 admissions, 0 waits, 0 timeouts, 0 steps" in capsys.readouterr().out
    assert testing.drain() == 1
    session.refresh(car)
    assert car.mileage == 5


def test_sweep_leaves_work_within_its_grace_alone(session: Session, car: Car, stepwise: Stepwise) -> None:
    lost_admission(session, car)
    assert stepwise("sweep", "--grace", "3600") == 0
    assert testing.enqueued() == []


def test_sweep_every_seconds_goes_on_after_a_failed_round(
    session: Session,
    car: Car,
    stepwise: Stepwise,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A round that fails (the database restarting) is reported; the next round sweeps."""
    # Given a database that refuses the first round
    lost_admission(session, car)
    rounds: list[str] = []
    real_sweep = sweeper.sweep

    def flaky_sweep(session: Session, **options: Any) -> SweepReport:
        rounds.append("sweep")
        if len(rounds) == 1:
            raise OperationalError("SELECT", {}, Exception("the database system is starting up"))
        return real_sweep(session, **options)

    def sleep(seconds: float) -> None:
        assert seconds == 10
        if len(rounds) == 2:
            raise KeyboardInterrupt  # the operator stops the loop

    monkeypatch.setattr(sweeper, "sweep", flaky_sweep)
    monkeypatch.setattr(time, "sleep", sleep)

    # When the command sweeps every 10 seconds
    status = stepwise("sweep", "--every", "10")

    # Then the first round failed, the second sent the admission again, and ^C stopped it
    assert (status, rounds) == (130, ["sweep", "sweep"])
    output = capsys.readouterr()
    assert "the sweep failed, trying again: the database system is starting up" in output.err
    assert "sent again: 1 admissions" in output.out
    assert len(testing.enqueued("stepwise.admit")) == 1


def test_sweep_needs_the_workers_broker(
    stepwise: Stepwise, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("REDIS_URL")
    monkeypatch.delenv("RABBITMQ_URL", raising=False)
    assert stepwise("sweep") == 1
    assert "set REDIS_URL (or RABBITMQ_URL)" in capsys.readouterr().err


def test_worker_runs_dramatiq_on_the_engine_jobs_and_the_given_modules(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given
    started: list[list[str]] = []

    def execv(path: str, argv: list[str]) -> None:
        started.append([path, *argv])
        raise SystemExit(0)

    monkeypatch.setattr(os, "execv", execv)
    monkeypatch.delenv(db.POOL_SIZE_VARIABLE, raising=False)

    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")

    # When
    with pytest.raises(SystemExit):
        cli.main(["worker", "tests.domain", "app.models", "-p", "2", "-t", "4"])

    # Then the command is replaced by Dramatiq's, in this Python
    assert started == [
        [
            sys.executable,
            sys.executable,
            "-m",
            "dramatiq",
            "engine.jobs",
            "tests.domain",
            "app.models",
            "--processes",
            "2",
            "--threads",
            "4",
        ]
    ]


@pytest.mark.parametrize(
    ("cpus", "arguments", "processes", "threads", "pool"),
    [
        (2, [], None, 64, 34),  # two processes (one per CPU): 64 threads, 32 + 2 connections each
        (4, [], None, 32, 18),  # four: 128 threads, 64 + 8 connections in all
        (16, [], None, 8, 10),  # never fewer than Dramatiq's 8 threads, nor 8 + 2 connections
        (16, ["-p", "2"], "2", 64, 34),  # the processes given, not the CPUs, share them
        (2, ["-t", "4"], None, 4, 6),  # no more connections than threads + 2
    ],
)
def test_worker_shares_128_threads_and_64_connections_among_its_processes(
    monkeypatch: pytest.MonkeyPatch,
    cpus: int,
    arguments: list[str],
    processes: str | None,
    threads: int,
    pool: int,
) -> None:
    started: list[list[str]] = []
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")

    def execv(path: str, argv: list[str]) -> None:
        started.append(argv)
        raise SystemExit(0)

    monkeypatch.setattr(os, "execv", execv)
    monkeypatch.setattr(multiprocessing, "cpu_count", lambda: cpus)
    monkeypatch.delenv(cli.WORKER_TIMEOUT_VARIABLE, raising=False)
    monkeypatch.delenv(db.POOL_SIZE_VARIABLE, raising=False)
    with pytest.raises(SystemExit):
        cli.main(["worker", *arguments])
    # Threads mostly wait for their group-commit batch: more of them share each batch.
    given = ["--processes", processes] if processes else []
    assert started == [[sys.executable, "-m", "dramatiq", "engine.jobs", *given, "--threads", str(threads)]]
    # A thread holds a connection only while its body runs, and the shared batch one more:
    # one machine's workers keep ~64 connections, within PostgreSQL's default 100.
    assert os.environ[db.POOL_SIZE_VARIABLE] == str(pool)
    # An idle Redis worker fetches again at least every 100 ms (Dramatiq's own default: 1000 ms).
    assert os.environ[cli.WORKER_TIMEOUT_VARIABLE] == "100"


def test_worker_keeps_a_pool_size_given_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")
    monkeypatch.setenv(db.POOL_SIZE_VARIABLE, "50")

    def execv(path: str, argv: list[str]) -> None:
        raise SystemExit(0)

    monkeypatch.setattr(os, "execv", execv)
    monkeypatch.delenv(cli.WORKER_TIMEOUT_VARIABLE, raising=False)
    with pytest.raises(SystemExit):
        cli.main(["worker", "-t", "4"])
    assert os.environ[db.POOL_SIZE_VARIABLE] == "50"


def test_worker_idle_poll_sets_dramatiqs_worker_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")
    monkeypatch.delenv(db.POOL_SIZE_VARIABLE, raising=False)
    monkeypatch.delenv(cli.WORKER_TIMEOUT_VARIABLE, raising=False)

    def execv(path: str, argv: list[str]) -> None:
        raise SystemExit(0)

    monkeypatch.setattr(os, "execv", execv)
    with pytest.raises(SystemExit):
        cli.main(["worker", "--idle-poll", "10"])
    assert os.environ[cli.WORKER_TIMEOUT_VARIABLE] == "10"
