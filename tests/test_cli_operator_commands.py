"""The operator's commands on the command line call the same engine commands as the
studio: each changes what it says, is audited with who ran it, and a command that
changes nothing exits 1 saying why."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import select, text
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

import engine
from engine import cli, db
from engine.models import Achievement, Action, ActionEvent, AuditEntry
from tests.domain import Car

ROOT = Path(__file__).resolve().parent.parent


def stepwise(database: Engine, *args: str) -> subprocess.CompletedProcess[str]:
    url = database.url.render_as_string(hide_password=False)
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "RABBITMQ_URL", "DATABASE_URL")}
    imports = [] if args[0] == "metrics" else ["--import", "tests.domain"]
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", *args, "--database-url", url, *imports],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def status_of(session: Session, action_id: int) -> str:
    session.expire_all()
    return session.scalars(select(Action.status).where(Action.id == action_id)).one()


@pytest.fixture
def waiting(session: Session, car: Car) -> Action:
    engine.define(Car, "change_location", outbound=True)
    return engine.now(car, "change_location", "Oslo")


def test_cancel_from_the_command_line_is_audited_and_refused_the_second_time(
    database: Engine, session: Session, waiting: Action
) -> None:
    done = stepwise(database, "cancel", str(waiting.id), "--by", "zoe", "--reason", "duplicate")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"cancel action {waiting.id}: cancelled"
    assert status_of(session, waiting.id) == "cancelled"
    entry = session.scalars(select(AuditEntry)).one()
    assert (entry.command, entry.by, entry.reason, entry.cause) == ("cancel", "zoe", "duplicate", "operator")

    again = stepwise(database, "cancel", str(waiting.id), "--by", "zoe")
    assert again.returncode == 1
    assert "changed nothing: already_completed" in again.stderr


def test_reject_then_retry_then_approve_from_the_command_line(
    database: Engine, session: Session, waiting: Action
) -> None:
    assert stepwise(database, "reject", str(waiting.id), "--by", "amy").returncode == 0
    assert status_of(session, waiting.id) == "failed"
    retried = stepwise(database, "retry", str(waiting.id), "--by", "amy", "--timeout", "60")
    assert retried.returncode == 0, retried.stderr
    assert status_of(session, waiting.id) == "performing"
    assert stepwise(database, "approve", str(waiting.id), "--by", "amy").returncode == 0
    assert status_of(session, waiting.id) == "succeeded"
    commands = session.scalars(select(AuditEntry.command).order_by(AuditEntry.id)).all()
    assert commands == ["reject", "retry", "approve"]


def test_forget_bulk_and_metrics_from_the_command_line(
    database: Engine, session: Session, car: Car, waiting: Action
) -> None:
    engine.define(Car, "visit", Car.change_location, checksum=lambda car, place: place)
    engine.now(car, "visit", "Rome")
    key = session.scalars(select(Achievement.checksum_key)).one()
    assert stepwise(database, "forget", key).returncode == 0
    assert session.scalars(select(Achievement)).all() == []

    bulk = stepwise(database, "bulk", "cancel", "--name", "change_location", "--status", "performing")
    assert bulk.returncode == 0, bulk.stderr
    assert bulk.stdout.splitlines()[-1].startswith("bulk cancel: 1 of 1 matching actions")
    assert status_of(session, waiting.id) == "cancelled"

    exposition = stepwise(database, "metrics")
    assert exposition.returncode == 0, exposition.stderr
    assert 'stepwise_actions{name="change_location",status="cancelled"} 1.0' in exposition.stdout


def test_a_command_on_an_unknown_action_says_so(database: Engine) -> None:
    missing = stepwise(database, "approve", "999999")
    assert missing.returncode == 1
    assert "changed nothing: not_found" in missing.stderr


def test_a_command_on_sqlite_uses_connections_with_foreign_keys_on(tmp_path: Path) -> None:
    # Given a command's database (checked reachable before the command configures it)
    arguments = argparse.Namespace(database_url=f"sqlite:///{tmp_path / 'stepwise.db'}")
    with cli.database(arguments) as sa_engine:
        # When the command configures the engine and opens a session
        db.configure(sa_engine)
        with db.session() as session:
            # Then its connection enforces foreign keys (a deleted lane clears its members' link)
            assert session.execute(text("PRAGMA foreign_keys")).scalar() == 1


def test_skip_from_the_command_line_completes_a_failed_leaf_and_says_which_leaf_to_skip(
    database: Engine, session: Session, car: Car
) -> None:
    # Given a trip that failed because its leg broke down
    engine.define(Car, "leg", Car.breakdown)
    trip = engine.define(Car, "trip")

    @trip.step
    def start(car: Car, step: engine.StepContext) -> None:
        step.do("leg")

    with engine.testing.handle_exceptions():
        root = engine.now(car, "trip")
        engine.testing.drain()
    leg = session.scalars(select(Action.id).where(Action.name == "leg")).one()

    # When the operator tries to skip the trip, she is told to skip the leg
    refused = stepwise(database, "skip", str(root.id), "--by", "zoe")
    assert refused.returncode == 1
    assert f"action {leg} below it failed; skip that one instead" in refused.stderr

    # and skipping the leg completes it and reopens the trip (which carries on where its
    # definition is imported: here, the test's trip is unknown to the command's process)
    done = stepwise(database, "skip", str(leg), "--by", "zoe", "--reason", "towed")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"skip action {leg}: skipped"
    assert status_of(session, leg) == "succeeded"
    reopened = session.scalars(
        select(ActionEvent).where(ActionEvent.action_id == root.id, ActionEvent.event == "retried")
    ).one()
    assert reopened.by == "zoe"
    entries = session.scalars(select(AuditEntry).order_by(AuditEntry.id)).all()
    assert [(e.command, e.result, e.reason) for e in entries] == [
        ("skip", "not_a_leaf", None),
        ("skip", "skipped", "towed"),
    ]
