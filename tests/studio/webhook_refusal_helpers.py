"""Fixtures and helpers of the webhook refusal tests: a paint job waiting for the outside
world (``painting``), the check that a refused delivery changed nothing
(``nothing_changes``), a completion body for an action, and the assertion of a JSON refusal.
The test modules import the fixtures and name them in ``__all__``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from sqlalchemy import func, select
from sqlalchemy.orm import Session
from werkzeug.test import TestResponse

import engine
from app.database import db
from app.webhooks.deliveries import WebhookDelivery
from engine.models import Action, AuditEntry
from tests.domain import Car


def order_paint(car: Car, *colors: str) -> None:
    """The paint shop is asked; it completes the action from outside."""


@pytest.fixture
def painting(session: Session, car: Car) -> Action:
    engine.define(Car, "paint", order_paint, outbound=True)
    return engine.now(car, "paint", "red")


@pytest.fixture
def nothing_changes(app: Flask, session: Session, painting: Action) -> Iterator[None]:
    """After the test: the paint job still waits, no audit entry, no delivery stored."""
    yield
    session.expire_all()
    assert session.get(Action, painting.id).status == "performing"  # type: ignore[union-attr]
    assert session.scalar(select(func.count()).select_from(AuditEntry)) == 0
    with app.app_context():
        assert db.session.scalar(select(func.count()).select_from(WebhookDelivery)) == 0


def body_for(action: Action, **more: Any) -> dict[str, Any]:
    return {"id": "c-1", "action_id": action.id, "status": "succeeded", **more}


def refused(answer: TestResponse, code: int, error: str) -> str:
    """Assert a JSON refusal; return its message."""
    assert answer.status_code == code, answer.text
    assert answer.mimetype == "application/json"
    assert answer.json is not None
    assert answer.json["error"] == error, answer.json
    message = answer.json["message"]
    assert isinstance(message, str) and message
    return message
