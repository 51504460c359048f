"""Given the studio, GET /api/openapi.json is an OpenAPI 3.1 document that describes every
route of the JSON API and the completion webhook, as the app's URL map has them, and
nothing else; its references resolve and each path's parameters are declared.

Not a spec case: the studio is ours (issue 4, "Webhooks and API").
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from flask import Flask

from tests.studio.support import StudioClient

DOCUMENTED = ("api.", "api_schedules.", "webhooks.")
METHODS = {"GET", "POST", "PUT", "PATCH", "DELETE"}


def routes(app: Flask) -> dict[str, set[str]]:
    """The API's and webhooks' routes as OpenAPI paths, with their methods."""
    found: dict[str, set[str]] = {}
    for rule in app.url_map.iter_rules():
        if rule.endpoint.startswith(DOCUMENTED):
            path = re.sub(r"<(?:[a-z]+:)?([a-z_]+)>", r"{\1}", rule.rule)
            found.setdefault(path, set()).update(m.lower() for m in (rule.methods or set()) & METHODS)
    return found


def refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref":
                yield value
            else:
                yield from refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from refs(item)


def test_the_document_is_openapi_3_1_json(viewer_client: StudioClient) -> None:
    answer = viewer_client.get("/api/openapi.json")

    assert answer.status_code == 200
    assert answer.mimetype == "application/json"
    document = json.loads(answer.text)
    assert document["openapi"] == "3.1.0"
    assert document["info"]["title"] and document["info"]["version"]


def test_the_document_describes_every_route_of_the_api_and_the_webhook_and_no_other(
    app: Flask, viewer_client: StudioClient
) -> None:
    document = viewer_client.get("/api/openapi.json").json
    assert document is not None

    described = {path: set(operations) for path, operations in document["paths"].items()}
    assert described == routes(app)
    assert {"/api/actions", "/api/actions/{action_id}", "/api/actions/{action_id}/tree", "/api/lanes"} <= set(
        described
    )
    assert described["/webhooks/complete"] == {"post"}


def test_every_operation_is_complete_and_every_reference_resolves(viewer_client: StudioClient) -> None:
    document = viewer_client.get("/api/openapi.json").json
    assert document is not None

    operation_ids = []
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            operation_ids.append(operation["operationId"])
            assert operation["summary"] and operation["responses"], (path, method)
            assert all(re.fullmatch(r"[1-5][0-9][0-9]", code) for code in operation["responses"])
            # each {parameter} of the path is declared
            declared = {p["name"] for p in operation.get("parameters", []) if p["in"] == "path"}
            assert declared == set(re.findall(r"{([a-z_]+)}", path)), path
    assert len(operation_ids) == len(set(operation_ids))

    schemas = document["components"]["schemas"]
    for target in set(refs(document)):
        assert target.startswith("#/components/schemas/"), target
        assert target.removeprefix("#/components/schemas/") in schemas, target
    schemes = document["components"]["securitySchemes"]
    webhook = document["paths"]["/webhooks/complete"]["post"]
    assert {name for requirement in webhook["security"] for name in requirement} <= set(schemes)
    assert schemes["webhookSignature"]["name"] == "X-Stepwise-Signature"


def test_the_documented_refusals_of_the_webhook_are_the_ones_it_gives(viewer_client: StudioClient) -> None:
    document = viewer_client.get("/api/openapi.json").json
    assert document is not None

    webhook = document["paths"]["/webhooks/complete"]["post"]
    assert set(webhook["responses"]) == {"200", "400", "401", "404", "409", "413", "422", "503"}
    status_enum = document["components"]["schemas"]["CompletionRequest"]["properties"]["status"]["enum"]
    assert status_enum == ["cancelled", "failed", "succeeded", "timed_out"]
