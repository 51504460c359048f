"""Given an outbound action waiting for the outside world, every delivery to
/webhooks/complete that is not a well-signed, fresh, well-formed completion of an outbound
action is refused with a 4xx JSON answer that says what is wrong, and changes nothing.
Odd bodies never get a 5xx.

Not a spec case: the studio is ours (issue 4, "Webhooks and API": a bad signature, a stale
timestamp, malformed JSON).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from sqlalchemy import func, select
from sqlalchemy.orm import Session
from werkzeug.test import TestResponse

import engine
from app.database import db
from app.pages.webhooks import MAX_BODY, sign
from app.webhook_deliveries import WebhookDelivery
from engine.models import Action, AuditEntry
from tests.domain import Car
from tests.studio.support import StudioClient
from tests.studio.support_webhooks import SECRET, URL, deliver, unix_now


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


# --- signature ---------------------------------------------------------------------------------


@pytest.mark.usefixtures("nothing_changes")
def test_a_signature_made_with_another_secret_is_refused(client: StudioClient, painting: Action) -> None:
    answer = deliver(client, body_for(painting), secret="not the shared secret")

    message = refused(answer, 401, "bad_signature")
    assert "does not match" in message
    assert answer.headers["WWW-Authenticate"].startswith("Stepwise-HMAC-SHA256")


@pytest.mark.usefixtures("nothing_changes")
def test_a_body_changed_after_signing_is_refused(client: StudioClient, painting: Action) -> None:
    # Given a request signed for one body
    stamp = str(unix_now())
    signed = json.dumps(body_for(painting, status="failed")).encode()
    signature = sign(SECRET, stamp, signed)

    # When the body is changed on the way
    changed = json.dumps(body_for(painting, status="succeeded")).encode()
    answer = deliver(client, raw=changed, timestamp=stamp, signature=signature)

    refused(answer, 401, "bad_signature")


@pytest.mark.usefixtures("nothing_changes")
def test_a_signature_over_another_timestamp_is_refused(client: StudioClient, painting: Action) -> None:
    data = json.dumps(body_for(painting)).encode()
    answer = deliver(client, raw=data, timestamp=unix_now(), signature=sign(SECRET, unix_now() - 10, data))

    refused(answer, 401, "bad_signature")


@pytest.mark.usefixtures("nothing_changes")
@pytest.mark.parametrize(
    ("headers", "error", "says"),
    [
        ({"X-Stepwise-Signature": ""}, "missing_signature", "X-Stepwise-Signature header is missing"),
        ({"X-Stepwise-Timestamp": ""}, "missing_timestamp", "X-Stepwise-Timestamp header is missing"),
        ({"X-Stepwise-Signature": "", "X-Stepwise-Timestamp": ""}, "missing_timestamp", "missing"),
        ({"X-Stepwise-Signature": "md5=abc"}, "bad_signature", "sha256= followed by 64"),
        ({"X-Stepwise-Signature": "sha256=" + "g" * 64}, "bad_signature", "sha256= followed by 64"),
        ({"X-Stepwise-Signature": "sha256=" + "é" * 64}, "bad_signature", "sha256= followed by 64"),
        ({"X-Stepwise-Signature": "sha256=" + "0" * 64}, "bad_signature", "does not match"),
        ({"X-Stepwise-Timestamp": "yesterday"}, "bad_timestamp", "whole unix seconds"),
        ({"X-Stepwise-Timestamp": "1.7e9"}, "bad_timestamp", "whole unix seconds"),
        ({"X-Stepwise-Timestamp": "-5"}, "bad_timestamp", "whole unix seconds"),
        ({"X-Stepwise-Timestamp": "9" * 400}, "bad_timestamp", "whole unix seconds"),
        ({"X-Stepwise-Timestamp": "\u0661\u0667" + "\u0660" * 8}, "bad_timestamp", "whole unix seconds"),
    ],
    ids=[
        "no-signature",
        "no-timestamp",
        "neither",
        "md5",
        "not-hex",
        "not-ascii",
        "zeros",
        "word-timestamp",
        "float-timestamp",
        "negative-timestamp",
        "huge-timestamp",
        "arabic-digits",
    ],
)
def test_a_missing_or_malformed_signature_or_timestamp_is_refused(
    client: StudioClient, painting: Action, headers: dict[str, str], error: str, says: str
) -> None:
    answer = deliver(client, body_for(painting), headers=headers)

    assert says in refused(answer, 401, error)


def test_the_signatures_hex_may_be_upper_case(
    client: StudioClient, painting: Action, session: Session
) -> None:
    data = json.dumps(body_for(painting)).encode()
    stamp = unix_now()
    upper = "sha256=" + sign(SECRET, stamp, data).removeprefix("sha256=").upper()

    answer = deliver(client, raw=data, timestamp=stamp, signature=upper)

    assert answer.status_code == 200
    session.expire_all()
    assert session.get(Action, painting.id).status == "succeeded"  # type: ignore[union-attr]


# --- timestamp -----------------------------------------------------------------------------------


@pytest.mark.usefixtures("nothing_changes")
@pytest.mark.parametrize(("offset", "says"), [(-301, "301 seconds old"), (301, "301 seconds in the future")])
def test_a_stale_or_future_timestamp_is_refused_as_a_replay(
    client: StudioClient, painting: Action, offset: int, says: str
) -> None:
    # A request signed correctly, but more than five minutes away from the server's clock
    answer = deliver(client, body_for(painting), timestamp=unix_now() + offset)

    message = refused(answer, 401, "stale_timestamp")
    assert message.startswith("stale timestamp")
    assert says in message
    assert "replay" in message


@pytest.mark.parametrize("offset", [-299, 299])
def test_a_timestamp_within_five_minutes_is_accepted(
    client: StudioClient, session: Session, painting: Action, offset: int
) -> None:
    answer = deliver(client, body_for(painting), timestamp=unix_now() + offset)

    assert answer.status_code == 200
    session.expire_all()
    assert session.get(Action, painting.id).status == "succeeded"  # type: ignore[union-attr]


# --- body ----------------------------------------------------------------------------------------


@pytest.mark.usefixtures("nothing_changes")
@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b"", "the body is empty"),
        (b"   ", "the body is empty"),
        (b"{", "not valid JSON"),
        (b'{"id": "c-1",}', "not valid JSON"),
        (b"\xff\xfe{}", "not UTF-8"),
        (b'{"id": "c-1", "action_id": NaN}', "NaN is not a JSON number"),
        (b'{"id": "c-1", "action_id": -Infinity}', "-Infinity is not a JSON number"),
        (b'{"id": "c-1", "action_id": 1e999}', "too large"),
        (b'{"action_id": ' + b"9" * 5000 + b"}", "not valid JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "not valid JSON"),
        (b"<xml/>", "not valid JSON"),
        (b"id=c-1&status=succeeded", "not valid JSON"),
    ],
    ids=[
        "empty",
        "blank",
        "unclosed",
        "trailing-comma",
        "not-utf8",
        "nan",
        "infinity",
        "overflowing-float",
        "5000-digit-integer",
        "deep-nesting",
        "xml",
        "form",
    ],
)
def test_malformed_json_is_refused_with_400(client: StudioClient, raw: bytes, says: str) -> None:
    answer = deliver(client, raw=raw)

    assert says in refused(answer, 400, "malformed_json")


@pytest.mark.usefixtures("nothing_changes")
def test_missing_fields_are_named(client: StudioClient) -> None:
    answer = deliver(client, {})

    message = refused(answer, 422, "missing_fields")
    assert set(answer.json["fields"]) == {"id", "status", "action_id"}  # type: ignore[index]
    assert "id is required" in message
    assert "status is required: one of cancelled, failed, succeeded, timed_out" in message


@pytest.mark.usefixtures("nothing_changes")
def test_an_incomplete_lane_address_names_what_is_missing(client: StudioClient) -> None:
    answer = deliver(client, {"id": "c-1", "status": "succeeded", "actor_type": "Car", "name": "paint"})

    refused(answer, 422, "missing_fields")
    assert answer.json["fields"] == {"actor_id": "is required with actor_type and name"}  # type: ignore[index]


@pytest.mark.usefixtures("nothing_changes")
@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        ({"status": "done"}, "status", "must be one of cancelled, failed, succeeded, timed_out, not 'done'"),
        ({"status": "SUCCEEDED"}, "status", "must be one of"),
        ({"status": 1}, "status", "not a number"),
        ({"action_id": "42"}, "action_id", "must be an integer, not a string"),
        ({"action_id": True}, "action_id", "must be an integer, not a boolean"),
        ({"action_id": 1.5}, "action_id", "must be an integer, not a number"),
        ({"action_id": 0}, "action_id", "between 1 and"),
        ({"action_id": 10**30}, "action_id", "between 1 and"),
        ({"id": 7}, "id", "must be a string, not a number"),
        ({"id": ""}, "id", "must not be empty"),
        ({"id": "x" * 256}, "id", "at most 255 characters"),
        ({"id": "a\x00b"}, "id", "NUL"),
        ({"note": ["a"]}, "note", "must be a string, not an array"),
        ({"note": "n" * 10_001}, "note", "at most 10,000 characters"),
        ({"payload": [1, 2]}, "payload", "must be an object, not an array"),
        ({"payload": "x"}, "payload", "must be an object, not a string"),
        ({"payload": {"a": "\x00"}}, "payload", "NUL"),
        ({"colour": "red"}, "colour", "is not a field"),
        ({"actor_type": "Car", "actor_id": 1, "name": "paint"}, "action_id", "not both"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_fields_of_the_wrong_type_or_value_are_named(
    client: StudioClient, painting: Action, body: dict[str, Any], field: str, says: str
) -> None:
    answer = deliver(client, body_for(painting, **body))

    refused(answer, 422, "invalid_fields")
    assert says in answer.json["fields"][field]  # type: ignore[index]


@pytest.mark.usefixtures("nothing_changes")
def test_a_lone_surrogate_is_refused(client: StudioClient, painting: Action) -> None:
    raw = json.dumps(body_for(painting)).replace('"c-1"', '"c-\\ud800"').encode()
    answer = deliver(client, raw=raw)

    refused(answer, 422, "invalid_fields")
    assert "unpaired surrogate" in answer.json["fields"]["id"]  # type: ignore[index]


@pytest.mark.usefixtures("nothing_changes")
def test_a_payload_nested_too_deeply_is_refused(client: StudioClient, painting: Action) -> None:
    payload: dict[str, Any] = {}
    inner = payload
    for _ in range(40):
        inner["a"] = {}
        inner = inner["a"]

    answer = deliver(client, body_for(painting, payload=payload))

    refused(answer, 422, "invalid_fields")
    assert "nest more than 32 levels" in answer.json["fields"]["payload"]  # type: ignore[index]


@pytest.mark.usefixtures("nothing_changes")
def test_a_body_larger_than_a_mebibyte_is_refused(client: StudioClient, painting: Action) -> None:
    answer = deliver(client, body_for(painting, note="n" * (MAX_BODY + 1)))

    refused(answer, 413, "too_large")


# --- the action ----------------------------------------------------------------------------------


@pytest.mark.usefixtures("nothing_changes")
def test_an_unknown_action_is_404(client: StudioClient, painting: Action, car: Car) -> None:
    by_id = deliver(client, body_for(painting, action_id=painting.id + 1000))
    by_lane = deliver(
        client, {"id": "c-2", "status": "succeeded", "actor_type": "Car", "actor_id": car.id, "name": "wash"}
    )

    assert f"there is no action {painting.id + 1000}" in refused(by_id, 404, "unknown_action")
    assert f"there is no action 'wash' on Car/{car.id}" in refused(by_lane, 404, "unknown_action")


@pytest.mark.usefixtures("nothing_changes")
def test_an_action_that_is_not_outbound_is_409(client: StudioClient, session: Session, car: Car) -> None:
    engine.define(Car, "drive")
    drive = engine.now(car, "drive", 5)

    by_id = deliver(client, {"id": "c-1", "action_id": drive.id, "status": "succeeded"})
    by_lane = deliver(
        client, {"id": "c-2", "status": "succeeded", "actor_type": "Car", "actor_id": car.id, "name": "drive"}
    )

    assert "is not outbound" in refused(by_id, 409, "not_outbound")
    assert "is not outbound" in refused(by_lane, 409, "not_outbound")


@pytest.mark.usefixtures("nothing_changes")
def test_an_outbound_action_queued_behind_another_is_not_addressable_by_actor_and_name(
    client: StudioClient, session: Session, car: Car, painting: Action
) -> None:
    # Given a wash queued in the paint job's lane
    engine.define(Car, "wash", order_paint, outbound=True, concurrency_key=painting.concurrency_key)
    wash = engine.now(car, "wash")
    assert wash.status == "pending"

    answer = deliver(
        client, {"id": "c-1", "status": "succeeded", "actor_type": "Car", "actor_id": car.id, "name": "wash"}
    )

    assert "give its action_id instead" in refused(answer, 409, "not_current")
    assert answer.json["action_id"] == wash.id  # type: ignore[index]


# --- never a 5xx ---------------------------------------------------------------------------------


ODD_BODIES: list[Any] = [
    [],
    [1, 2, 3],
    "succeeded",
    42,
    None,
    True,
    {"id": None, "status": None, "action_id": None},
    {"id": {"nested": "id"}, "status": ["succeeded"], "action_id": {"id": 1}},
    {"id": "c", "status": "succeeded", "action_id": -1},
    {"id": "c", "status": "succeeded", "action_id": 2**63},
    {"id": "c", "status": "succeeded", "action_id": 2**63 - 1},
    {"id": "c", "status": "succeeded", "actor_type": [], "actor_id": {}, "name": 1},
    {"id": "c", "status": "succeeded", "actor_type": "Car", "actor_id": True, "name": "paint"},
    {"id": "c", "status": "succeeded", "actor_type": "Car", "actor_id": 10**40, "name": "paint"},
    {"id": "c", "status": "succeeded", "actor_type": "C" * 300, "actor_id": "1", "name": "paint"},
    {"id": "c", "status": "succeeded", "actor_type": " ", "actor_id": "1", "name": "paint"},
    {"id": "c" * 100_000, "status": "succeeded", "action_id": 1},
    {"id": "c", "status": "superseded", "action_id": 1},
    {"id": "c", "status": "pending", "action_id": 1},
    {"id": "c", "status": "succeeded", "action_id": 1, "note": {"a": 1}},
    {"id": "c", "status": "succeeded", "action_id": 1, "payload": {"n": 10**200, "f": 1.5e300}},
    {"": "", "\u0000": "\u0000"},
    {"id": "☃", "status": "succeeded", "action_id": 1, "payload": {"☃": ["☃"]}},
]


def test_odd_bodies_never_get_a_5xx(client: StudioClient, session: Session, painting: Action) -> None:
    for number, body in enumerate(ODD_BODIES):
        if isinstance(body, dict) and body.get("action_id") == 1:
            body = {**body, "action_id": painting.id + 1}  # an action that does not exist
        answer = deliver(client, body)
        assert 400 <= answer.status_code < 500, (number, body, answer.status_code, answer.text[:300])
        assert answer.mimetype == "application/json"
        assert answer.json is not None and answer.json["error"] and answer.json["message"]
    session.expire_all()
    assert session.get(Action, painting.id).status == "performing"  # type: ignore[union-attr]


def test_a_huge_payload_number_is_kept(client: StudioClient, session: Session, painting: Action) -> None:
    answer = deliver(client, body_for(painting, payload={"n": 10**200, "pi": 3.14}))

    assert answer.status_code == 200
    session.expire_all()
    assert session.get(Action, painting.id).result == {"n": 10**200, "pi": 3.14}  # type: ignore[union-attr]


# --- the endpoint itself -------------------------------------------------------------------------


def test_the_endpoint_answers_only_post_in_json(client: StudioClient) -> None:
    answer = client.get(URL)

    assert answer.status_code == 405
    assert answer.mimetype == "application/json"
    assert answer.json["error"] == "Method Not Allowed"  # type: ignore[index]


@pytest.mark.usefixtures("nothing_changes")
def test_without_a_shared_secret_the_webhook_is_off(
    app: Flask, client: StudioClient, painting: Action
) -> None:
    app.config["STEPWISE_WEBHOOK_SECRET"] = None

    answer = deliver(client, body_for(painting))

    assert "STEPWISE_WEBHOOK_SECRET is not set" in refused(answer, 503, "webhook_disabled")


@pytest.mark.usefixtures("nothing_changes")
def test_a_signed_in_operators_session_is_no_signature(
    operator_client: StudioClient, painting: Action
) -> None:
    # The studio's session and CSRF token do not stand in for the signature
    answer = operator_client.post(
        URL,
        json=body_for(painting),
        headers={"X-CSRF-Token": operator_client.csrf_token()},
    )

    refused(answer, 401, "missing_timestamp")
