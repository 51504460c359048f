"""``stepwise signal ID NAME --payload JSON`` sends a signal as the studio's form does:
audited with who sent it; refused with exit 1 and the reason for a finished or unknown
action; a payload that is not JSON is a usage error (exit 2) that records nothing."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

import engine
from engine.models import AuditEntry, Signal
from tests.domain import Car
from tests.test_cli_operator_commands import stepwise


def test_a_signal_from_the_command_line_is_consumed_by_the_waiting_step_and_audited(
    database: Engine, session: Session, car: Car
) -> None:
    # Given a step that waits for two signals (the command line knows none of its steps)
    both = engine.define(Car, "both")

    @both.step
    def hold(car: Car, step: engine.StepContext) -> None:
        step.wait_for_all("left", "right")

    action = engine.now(car, "both")

    # When one is sent from the command line
    done = stepwise(database, "signal", str(action.id), "left", "--payload", '{"n": 1}', "--by", "zoe")

    # Then the waiting step consumed it, and the audit says who sent what
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"signal 'left' to action {action.id}: consumed"
    session.expire_all()
    sent = session.scalars(select(Signal)).one()
    assert (sent.name, sent.payload, sent.sent_by, sent.consumed_at is not None) == (
        "left",
        {"n": 1},
        "zoe",
        True,
    )
    entry = session.scalars(select(AuditEntry)).one()
    assert (entry.command, entry.by, entry.result) == ("signal", "zoe", "consumed")


def test_a_signal_to_a_finished_action_from_the_command_line_is_refused(
    database: Engine, session: Session, car: Car
) -> None:
    done = engine.now(car, "drive", 1)
    refused = stepwise(database, "signal", str(done.id), "approved")
    assert refused.returncode == 1
    assert "changed nothing: finished" in refused.stderr
    unknown = stepwise(database, "signal", "987654", "approved")
    assert unknown.returncode == 1
    assert "changed nothing: not_found" in unknown.stderr
    assert session.scalars(select(Signal)).all() == []


def test_a_payload_that_is_not_json_is_a_usage_error(database: Engine, session: Session, car: Car) -> None:
    action = engine.now(car, "drive", 1)
    bad = stepwise(database, "signal", str(action.id), "go", "--payload", "{not json")
    assert bad.returncode == 2
    assert "--payload is not valid JSON" in bad.stderr
    assert session.scalars(select(AuditEntry)).all() == []
