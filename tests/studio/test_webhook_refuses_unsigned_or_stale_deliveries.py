"""Given an outbound action waiting for the outside world, a delivery to /webhooks/complete
whose signature is missing, malformed or made with another secret or over another body or
timestamp, or whose timestamp is more than five minutes away, is refused with a 401 JSON
answer that says what is wrong, and changes nothing (upper-case hex, and a timestamp within
five minutes, are accepted). The endpoint answers only POST; without a shared secret it is
off; a signed-in operator's session does not stand in for a signature.

Not a spec case: the studio is ours (issue 4, "Webhooks and API": a bad signature, a stale
timestamp, malformed JSON).
"""

from __future__ import annotations

import json

import pytest
from flask import Flask
from sqlalchemy.orm import Session

from app.webhooks.views import sign
from engine.models import Action
from tests.studio.support import StudioClient
from tests.studio.support_webhooks import SECRET, URL, deliver, unix_now
from tests.studio.webhook_refusal_helpers import body_for, nothing_changes, painting, refused

__all__ = ["nothing_changes", "painting"]  # the shared fixtures: pytest finds them in this module


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
