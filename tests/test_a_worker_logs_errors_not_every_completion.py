"""The ``stepwise`` logger: a WARNING for every error, every other event (a completed
action's too) at DEBUG. The history keeps them all; a line per action at INFO cost a busy
worker ~5% of its CPU (engine/history.py)."""

from __future__ import annotations

import logging

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import testing
from engine.models import Action
from tests.domain import Car


def lines(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "stepwise" and r.levelno == level]


def test_a_completed_action_logs_nothing_at_info(
    session: Session, car: Car, caplog: pytest.LogCaptureFixture
) -> None:
    engine.define(Car, "drive", Car.drive)
    caplog.set_level(logging.INFO, logger="stepwise")
    action = engine.now(car, "drive", 5)
    testing.drain()
    assert action.status == "succeeded"
    assert lines(caplog, logging.INFO) == []
    assert lines(caplog, logging.WARNING) == []


def test_a_completed_action_logs_its_line_at_debug(
    session: Session, car: Car, caplog: pytest.LogCaptureFixture
) -> None:
    engine.define(Car, "drive", Car.drive)
    caplog.set_level(logging.DEBUG, logger="stepwise")
    action = engine.now(car, "drive", 5)
    testing.drain()
    completed = [line for line in lines(caplog, logging.DEBUG) if line.startswith("completed ")]
    assert completed == [
        f"completed action={action.id} name=drive actor=Car/{car.id} cause=worker {{'status': 'succeeded'}}"
    ]


def test_a_failure_logs_a_warning_naming_its_action(
    session: Session, car: Car, caplog: pytest.LogCaptureFixture
) -> None:
    engine.define(Car, "breakdown", Car.breakdown)
    caplog.set_level(logging.INFO, logger="stepwise")
    with pytest.raises(RuntimeError, match="breakdown"):
        engine.now(car, "breakdown")  # run here: the body's error is the caller's
    action = session.scalars(select(Action).where(Action.name == "breakdown")).one()
    warnings = lines(caplog, logging.WARNING)
    assert warnings and all(f"action={action.id}" in line for line in warnings)
    assert any("RuntimeError" in line and "breakdown" in line for line in warnings)
    assert lines(caplog, logging.INFO) == []
