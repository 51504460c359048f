"""Given a tree with a failure, an outbound action waiting in its lane and a signed-in
viewer, every answer the JSON API and the completion webhook really give (pages, one
action, its tree, lanes, and each kind of refusal) is valid against the schema the OpenAPI
document gives for that route and status code: the document is generated from the models
that validate the input, and this test keeps the answers to it.

Not a spec case: the studio is ours (issue 12, "Libraries, not hand-kept copies").
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from openapi_schema_validator import OAS31Validator
from sqlalchemy.orm import Session
from werkzeug.test import TestResponse

from app.webhooks.views import MAX_BODY
from engine.models import Action
from tests.domain import Car
from tests.studio.support import StudioClient
from tests.studio.support_webhooks import deliver
from tests.studio.test_api_actions import given_a_failed_trip
from tests.studio.webhook_refusal_helpers import body_for, painting

__all__ = ["painting"]  # the shared fixture: pytest finds it in this module


@pytest.fixture
def document(viewer_client: StudioClient) -> dict[str, Any]:
    answer = viewer_client.get("/api/openapi.json")
    assert answer.status_code == 200 and answer.json is not None
    OAS31Validator.check_schema(
        {"$ref": "#/components/schemas/Error", "components": answer.json["components"]}
    )
    return answer.json


def route_of(document: dict[str, Any], url: str) -> str:
    path = url.split("?")[0]
    for template in document["paths"]:
        if re.fullmatch(re.sub(r"{[a-z_]+}", "[^/]+", template), path):
            return template
    raise AssertionError(f"{path} is not in the document")


def check(document: dict[str, Any], method: str, url: str, answer: TestResponse) -> None:
    """``answer`` is valid against the document's schema for its route and status code."""
    operation = document["paths"][route_of(document, url)][method]
    code = str(answer.status_code)
    assert code in operation["responses"], f"{method} {url} answered {code}, which the document leaves out"
    schema = operation["responses"][code]["content"]["application/json"]["schema"]
    validator = OAS31Validator({**schema, "components": document["components"]})
    errors = sorted(validator.iter_errors(answer.json), key=lambda e: list(e.path))
    assert not errors, f"{method} {url} {code}: " + "; ".join(
        f"{'/'.join(map(str, e.path))}: {e.message[:200]}" for e in errors[:5]
    )


def test_the_api_answers_match_the_document(
    viewer_client: StudioClient,
    client: StudioClient,
    document: dict[str, Any],
    session: Session,
    car: Car,
    painting: Action,
) -> None:
    # Given a failed trip (four actions) and a paint job waiting in its lane
    actions = given_a_failed_trip(session, car)
    urls = ["/api/actions", "/api/actions?limit=2", "/api/actions?status=failed&roots_only=true"]
    for action in [*actions.values(), painting]:
        urls += [f"/api/actions/{action.id}", f"/api/actions/{action.id}/tree"]
    urls += ["/api/lanes", "/api/lanes?outbound=true", "/api/lanes?limit=1"]
    refusals = [
        "/api/actions?limit=0",
        "/api/actions?state=failed",
        "/api/actions?created_after=yesterday",
        "/api/actions/999999",
        "/api/actions/999999/tree",
        "/api/actions/1?colour=red",
        "/api/lanes?outbound=perhaps",
    ]

    # When each is asked for, Then each answer matches the document
    for url in urls:
        answer = viewer_client.get(url)
        assert answer.status_code == 200, (url, answer.text[:300])
        check(document, "get", url, answer)
    for url in refusals:
        answer = viewer_client.get(url)
        assert answer.status_code in (400, 404), (url, answer.status_code)
        check(document, "get", url, answer)
    for url in ("/api/actions", "/api/lanes", f"/api/actions/{painting.id}"):
        check(document, "get", url, client.get(url))  # not signed in: 401


def test_the_webhook_answers_match_the_document(
    client: StudioClient, document: dict[str, Any], painting: Action
) -> None:
    url = "/webhooks/complete"
    answers = [
        deliver(client, raw=b"{"),  # 400
        deliver(client, body_for(painting), signature="sha256=" + "0" * 64),  # 401
        deliver(client, body_for(painting, action_id=painting.id + 1000)),  # 404
        deliver(client, {"id": "c-2", "status": "succeeded"}),  # 422 missing fields
        deliver(client, body_for(painting, status="done")),  # 422 invalid fields
        deliver(client, body_for(painting, note="n" * (MAX_BODY + 1))),  # 413
        deliver(client, body_for(painting)),  # 200 completed
        deliver(client, body_for(painting)),  # 200 replayed
        deliver(client, body_for(painting, id="c-3")),  # 200 already completed
        deliver(client, body_for(painting, note="another")),  # 422 id reused
    ]

    assert [a.status_code for a in answers] == [400, 401, 404, 422, 422, 413, 200, 200, 200, 422]
    for answer in answers:
        check(document, "post", url, answer)
