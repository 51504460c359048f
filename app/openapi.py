"""The OpenAPI 3.1 document of the studio's JSON API and of the completion webhook, written
by hand. ``GET /api/openapi.json`` serves it; a test checks that it names every route of the
``api`` and ``webhooks`` blueprints, and nothing else.
"""

from __future__ import annotations

from typing import Any

import engine

from .openapi_schemas import SCHEMAS, error_response, json_content, ref


def limit_parameters() -> list[dict[str, Any]]:
    return [
        {
            "name": "before",
            "in": "query",
            "description": "Keyset cursor: only ids below this one (the `next` link sets it)",
            "schema": {"type": "integer", "minimum": 1},
        },
        {
            "name": "limit",
            "in": "query",
            "schema": {"type": "integer", "minimum": 1, "maximum": 200, "default": 50},
        },
    ]


def query(name: str, description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "in": "query", "description": description, "schema": schema or {"type": "string"}}


ACTION_ID = {
    "name": "action_id",
    "in": "path",
    "required": True,
    "schema": {"type": "integer", "minimum": 1},
}

SIGNED_IN = {
    "401": error_response("Not signed in"),
}


def paths() -> dict[str, Any]:
    bad_parameter = error_response("A query parameter is unknown or malformed")
    unknown = error_response("No such action")
    return {
        "/api/actions": {
            "get": {
                "operationId": "listActions",
                "summary": "Actions matching the filters, newest first (a keyset page)",
                "tags": ["actions"],
                "parameters": [
                    query("status", "Only this status", ref("ActionStatus")),
                    query("name", "Only actions of this name"),
                    query("actor_type", "Only actions of actors of this type"),
                    query("actor_id", "Only actions of this actor (with actor_type)"),
                    query("concurrency_key", "Only actions in this lane"),
                    query(
                        "roots_only",
                        "Only roots (actions invoked without a parent step)",
                        {"type": "boolean"},
                    ),
                    query(
                        "created_after",
                        "Created at or after (ISO 8601)",
                        {"type": "string", "format": "date-time"},
                    ),
                    query(
                        "created_before",
                        "Created before (ISO 8601)",
                        {"type": "string", "format": "date-time"},
                    ),
                    query("search", "Text searched for in the arguments"),
                    *limit_parameters(),
                ],
                "responses": {
                    "200": {"description": "One page", "content": json_content(ref("ActionPage"))},
                    "400": bad_parameter,
                    **SIGNED_IN,
                },
            }
        },
        "/api/actions/{action_id}": {
            "get": {
                "operationId": "getAction",
                "summary": "One action with its steps, parents and errors (tracebacks included)",
                "tags": ["actions"],
                "parameters": [ACTION_ID],
                "responses": {
                    "200": {"description": "The action", "content": json_content(ref("ActionDetail"))},
                    "404": unknown,
                    **SIGNED_IN,
                },
            }
        },
        "/api/actions/{action_id}/tree": {
            "get": {
                "operationId": "getActionTree",
                "summary": "The action and every action below it, nested",
                "tags": ["actions"],
                "parameters": [ACTION_ID],
                "responses": {
                    "200": {"description": "The tree", "content": json_content(ref("Tree"))},
                    "404": unknown,
                    **SIGNED_IN,
                },
            }
        },
        "/api/lanes": {
            "get": {
                "operationId": "listLanes",
                "summary": "Lanes (performances) with their current action and queue length, newest first",
                "tags": ["lanes"],
                "parameters": [
                    query("concurrency_key", "Only this lane"),
                    query(
                        "outbound",
                        "true: only lanes waiting for an outbound completion; false: only the others",
                        {"type": "boolean"},
                    ),
                    *limit_parameters(),
                ],
                "responses": {
                    "200": {"description": "One page", "content": json_content(ref("LanePage"))},
                    "400": bad_parameter,
                    **SIGNED_IN,
                },
            }
        },
        "/api/openapi.json": {
            "get": {
                "operationId": "getOpenApi",
                "summary": "This document",
                "tags": ["meta"],
                "responses": {
                    "200": {
                        "description": "The OpenAPI 3.1 document",
                        "content": json_content({"type": "object"}),
                    },
                    **SIGNED_IN,
                },
            }
        },
        "/webhooks/complete": {
            "post": {
                "operationId": "completeOutboundAction",
                "summary": "Complete an outbound action from outside (signed, idempotent by id)",
                "description": (
                    'Sign `"{X-Stepwise-Timestamp}.{raw body}"` with HMAC-SHA256 and the shared secret '
                    "(STEPWISE_WEBHOOK_SECRET); send `X-Stepwise-Signature: sha256=<hex>`. A timestamp "
                    "more than 300 seconds from the server's clock is refused (replay). A second "
                    "delivery of an id gets the first answer again, with `X-Stepwise-Replayed: true`; "
                    "refusals before the engine is reached (404, 409) are not kept, so the id may be "
                    "sent again later."
                ),
                "tags": ["webhooks"],
                "security": [{"webhookSignature": [], "webhookTimestamp": []}],
                "requestBody": {
                    "required": True,
                    "content": json_content(
                        ref("CompletionRequest"),
                        {
                            "id": "dns-7f3a",
                            "action_id": 42,
                            "status": "succeeded",
                            "note": "zone live",
                            "payload": {"zone": "example.com"},
                        },
                    ),
                },
                "responses": {
                    "200": {
                        "description": "Completed, or completed before (completed: false, already_completed)",
                        "headers": {
                            "X-Stepwise-Replayed": {
                                "description": "true when this answer is the first delivery's, sent again",
                                "schema": {"type": "string"},
                            }
                        },
                        "content": json_content(ref("CompletionResult")),
                    },
                    "400": error_response("The body is not JSON (malformed_json)"),
                    "401": error_response(
                        "missing_timestamp, bad_timestamp, missing_signature, bad_signature, stale_timestamp"
                    ),
                    "404": error_response("No such action (unknown_action)"),
                    "409": error_response(
                        "not_outbound; not_current (queued behind another action: give its action_id); "
                        "in_progress (the same id is being handled: retry after Retry-After seconds)"
                    ),
                    "413": error_response("The body is larger than 1 MiB (too_large)"),
                    "422": error_response(
                        "missing_fields or invalid_fields (`fields` names each), or id_reused (the id "
                        "was used for another completion)"
                    ),
                    "503": error_response("STEPWISE_WEBHOOK_SECRET is not set (webhook_disabled)"),
                },
            }
        },
    }


def document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Stepwise studio API",
            "version": engine.__version__,
            "description": (
                "Read-only JSON API over the actions, trees and lanes, for a signed-in session "
                "(a viewer is enough), and the signed completion webhook for outbound actions. "
                "Times are UTC. Every error is JSON: {error, message}."
            ),
        },
        "tags": [
            {"name": "actions"},
            {"name": "lanes"},
            {"name": "webhooks"},
            {"name": "meta"},
        ],
        "security": [{"session": []}],
        "paths": paths(),
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {
                "session": {
                    "type": "apiKey",
                    "in": "cookie",
                    "name": "stepwise_session",
                    "description": "The studio's session cookie, after signing in at /login",
                },
                "webhookSignature": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "X-Stepwise-Signature",
                    "description": 'sha256=<hex HMAC-SHA256 of "{timestamp}.{raw body}", shared secret>',
                },
                "webhookTimestamp": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "X-Stepwise-Timestamp",
                    "description": "The time of sending in unix seconds (within 300 s of the server's)",
                },
            },
        },
    }
