"""Given an action whose step waits for a signal, a signed POST to /webhooks/signal sends it
(by action id, or by actor and action name); the step after the wait runs on a worker. The
delivery's id is the signal's key: a retried delivery is one signal, consumed once. Bad
input gets a 4xx JSON answer that says what is wrong, never a 5xx."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import StepContext, testing
from engine.models import Action, Signal
from tests.domain import Car
from tests.studio.support import StudioClient
from tests.studio.support_webhooks import deliver

URL = "/webhooks/signal"


@pytest.fixture
def waiting(session: Session, car: Car) -> tuple[Action, list[Any]]:
    """A payment that waits for the gateway's "captured" signal."""
    seen: list[Any] = []
    payment = engine.define(Car, "payment")

    @payment.step
    def charge(car: Car, step: StepContext) -> None:
        step.wait_for("captured", "declined")

    @payment.step
    def record(car: Car, step: StepContext) -> None:
        seen.append((step.signal.name, step.signal.payload, step.signal.sent_by) if step.signal else None)

    action = engine.now(car, "payment")
    assert action.status == "performing"
    return action, seen


def signals(session: Session, action: Action) -> list[tuple[str, str | None, bool]]:
    session.expire_all()
    rows = session.scalars(select(Signal).where(Signal.action_id == action.id).order_by(Signal.id))
    return [(s.name, s.delivery_key, s.consumed_at is not None) for s in rows]


def test_a_signed_signal_reaches_the_waiting_step(
    client: StudioClient, session: Session, waiting: tuple[Action, list[Any]]
) -> None:
    action, seen = waiting

    # When the gateway reports the capture
    answer = deliver(
        client,
        {"id": "gw-1", "action_id": action.id, "signal": "captured", "payload": {"amount": 40}},
        url=URL,
    )

    # Then it was consumed, and the next step ran on a worker with its payload
    assert answer.status_code == 200
    assert answer.get_json() == {
        "id": "gw-1",
        "signal_id": answer.get_json()["signal_id"],
        "signal": "captured",
        "action_id": action.id,
        "consumed": True,
        "replayed": False,
    }
    testing.drain()
    assert seen == [("captured", {"amount": 40}, "webhook")]
    session.expire_all()
    assert session.get(Action, action.id).status == "succeeded"  # type: ignore[union-attr]


def test_a_retried_delivery_is_one_signal_consumed_once(
    client: StudioClient, session: Session, car: Car, waiting: tuple[Action, list[Any]]
) -> None:
    action, seen = waiting
    body = {"id": "gw-2", "actor_type": "Car", "actor_id": car.id, "name": "payment", "signal": "declined"}

    # When the same delivery arrives twice, the second after the action finished
    first = deliver(client, body, url=URL)
    testing.drain()
    second = deliver(client, body, url=URL)

    # Then the second got the same signal back, replayed, and nothing ran twice
    assert first.status_code == second.status_code == 200
    assert second.get_json()["signal_id"] == first.get_json()["signal_id"]
    assert second.get_json()["replayed"] is True
    assert second.headers["X-Stepwise-Replayed"] == "true"
    testing.drain()
    assert seen == [("declined", None, "webhook")]
    assert signals(session, action) == [("declined", "gw-2", True)]


def test_an_id_reused_for_another_signal_is_refused(
    client: StudioClient, session: Session, waiting: tuple[Action, list[Any]]
) -> None:
    action, _ = waiting
    deliver(client, {"id": "gw-3", "action_id": action.id, "signal": "captured"}, url=URL)

    answer = deliver(client, {"id": "gw-3", "action_id": action.id, "signal": "declined"}, url=URL)

    assert answer.status_code == 422
    assert answer.get_json()["error"] == "id_reused"


@pytest.mark.parametrize(
    ("body", "code", "error", "says"),
    [
        (
            {"id": "x", "action_id": 99999, "signal": "go"},
            404,
            "unknown_action",
            "action 99999 does not exist",
        ),
        ({"id": "x", "action_id": 1}, 422, "missing_fields", "signal is required"),
        ({"id": "x", "signal": "go"}, 422, "missing_fields", "action_id is required"),
        ({"id": "x", "action_id": 2**70, "signal": "go"}, 422, "invalid_fields", "action_id"),
        ({"id": "x", "action_id": 1, "signal": "g" * 101}, 422, "invalid_fields", "signal"),
        (
            {"id": "x", "action_id": 1, "signal": "go", "colour": 1},
            422,
            "invalid_fields",
            "colour is not a field",
        ),
    ],
)
def test_bad_signal_deliveries_get_a_clear_4xx(
    client: StudioClient, body: dict[str, Any], code: int, error: str, says: str
) -> None:
    answer = deliver(client, body, url=URL)
    assert answer.status_code == code
    assert answer.get_json()["error"] == error
    assert says in answer.get_json()["message"]


def test_a_signal_to_a_finished_action_is_refused_with_409(
    client: StudioClient, session: Session, car: Car
) -> None:
    done = engine.now(car, "drive", 1)
    answer = deliver(client, {"id": "late", "action_id": done.id, "signal": "captured"}, url=URL)
    assert answer.status_code == 409
    assert answer.get_json()["error"] == "action_finished"
    assert "a finished action takes no signals" in answer.get_json()["message"]


def test_an_unsigned_signal_is_refused(client: StudioClient, waiting: tuple[Action, list[Any]]) -> None:
    action, _ = waiting
    answer = deliver(client, {"id": "x", "action_id": action.id, "signal": "captured"}, url=URL, signature="")
    assert answer.status_code == 401
    assert answer.get_json()["error"] == "missing_signature"
