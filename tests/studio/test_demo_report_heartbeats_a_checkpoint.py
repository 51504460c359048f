"""The demo's report generation processes its chunks heartbeating a checkpoint (the next
chunk's index), with a heartbeat timeout: its attempt row ends with full progress and the
last checkpoint, and the step's result says where it started."""

from __future__ import annotations

import random

import pytest
from flask import Flask
from sqlalchemy import select

import engine
from app import demo
from app.database import db
from engine import testing
from engine.models import Attempt


@pytest.fixture(autouse=True)
def demo_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fast chunks, no bad luck."""
    monkeypatch.setattr(demo, "REPORT_CHUNK_SECONDS", 0.0)
    monkeypatch.setattr(random, "random", lambda: 0.99)


def test_a_demo_report_generates_its_chunks_with_heartbeats(app: Flask) -> None:
    with app.app_context():
        report = demo.Report(name="sales", period="2025-W01")
        db.session.add(report)
        db.session.commit()
        action = engine.later(report, "publish")
        db.session.commit()
        testing.drain()
        attempts = db.session.scalars(select(Attempt)).all()
        [generation] = attempts
        assert (generation.outcome, generation.progress, generation.checkpoint) == ("succeeded", 1.0, 8)
        assert generation.lost_at is not None and generation.deadline_at is not None
        stored = db.session.scalars(select(engine.Action).where(engine.Action.name == "publish")).one()
        assert stored.status == "succeeded"
        assert action is not None
