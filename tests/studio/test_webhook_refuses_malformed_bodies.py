"""Given an outbound action waiting for the outside world, a signed delivery to
/webhooks/complete whose body is not well-formed JSON (400), lacks fields or has fields of
the wrong type or value (422), or is larger than a mebibyte (413) is refused with a JSON
answer that says what is wrong, and changes nothing. Odd bodies never get a 5xx, and a
huge number in a well-formed payload is kept.

Not a spec case: the studio is ours (issue 4, "Webhooks and API": a bad signature, a stale
timestamp, malformed JSON).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy.orm import Session

from app.webhooks.views import MAX_BODY
from engine.models import Action
from tests.studio.support import StudioClient
from tests.studio.support_webhooks import deliver
from tests.studio.webhook_refusal_helpers import body_for, nothing_changes, painting, refused

__all__ = ["nothing_changes", "painting"]  # the shared fixtures: pytest finds them in this module


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
