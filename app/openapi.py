"""The OpenAPI 3.1 document of the studio's JSON API and of the completion webhook, written
by hand. ``GET /api/openapi.json`` serves it; a test checks that it names every route of the
``api`` and ``webhooks`` blueprints, and nothing else.
"""

from __future__ import annotations

from typing import Any

import engine
from engine import status


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def nullable(schema_type: str, **more: Any) -> dict[str, Any]:
    return {"type": [schema_type, "null"], **more}


def json_content(schema: dict[str, Any], example: Any = None) -> dict[str, Any]:
    media: dict[str, Any] = {"schema": schema}
    if example is not None:
        media["example"] = example
    return {"application/json": media}


def error_response(description: str) -> dict[str, Any]:
    return {"description": description, "content": json_content(ref("Error"))}


TIME = nullable("string", format="date-time", description="UTC")

SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["error", "message"],
        "properties": {
            "error": {"type": "string", "description": "A code, e.g. bad_signature, not_found"},
            "message": {"type": "string", "description": "What is wrong, in words"},
            "parameter": {"type": "string", "description": "The query parameter at fault (400)"},
            "fields": {
                "type": "object",
                "additionalProperties": {"type": "string"},
                "description": "Each field at fault, with what is wrong with it (422)",
            },
        },
    },
    "ActionStatus": {"type": "string", "enum": list(status.ACTION_STATUSES)},
    "ActionSummary": {
        "type": "object",
        "required": ["id", "name", "actor_type", "actor_id", "status", "outbound"],
        "properties": {
            "id": {"type": "integer"},
            "name": {"type": "string"},
            "actor_type": {"type": "string"},
            "actor_id": {"type": "string"},
            "status": ref("ActionStatus"),
            "outbound": {"type": "boolean"},
            "started_at": TIME,
            "completed_at": TIME,
        },
    },
    "ErrorSummary": {
        "type": ["object", "null"],
        "properties": {
            "class": {"type": "string"},
            "message": {"type": "string"},
            "traceback": {"type": "string", "description": "Only on GET /api/actions/{action_id}"},
        },
    },
    "Action": {
        "allOf": [
            ref("ActionSummary"),
            {
                "type": "object",
                "properties": {
                    "arguments": {"type": "array", "description": "The arguments, as stored (JSON)"},
                    "root": {"type": "boolean", "description": "Invoked without a parent step"},
                    "tree_id": {"type": "integer", "description": "The root of the tree it belongs to"},
                    "concurrency_key": {"type": "string", "description": "Its lane"},
                    "checksum_key": {"type": "string"},
                    "checksum": nullable("string"),
                    "current_step_index": {"type": "integer"},
                    "timeout_seconds": nullable("integer"),
                    "deadline_at": TIME,
                    "superseded_by_id": nullable("integer"),
                    "result": nullable("object", description="The payload it was completed with"),
                    "error": ref("ErrorSummary"),
                    "created_at": TIME,
                    "updated_at": TIME,
                    "links": {
                        "type": "object",
                        "properties": {"self": {"type": "string"}, "tree": {"type": "string"}},
                    },
                },
            },
        ]
    },
    "Step": {
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "index": {"type": "integer", "description": "Which step of the definition"},
            "status": {"type": "string", "enum": list(status.STEP_STATUSES)},
            "attempt": {"type": "integer"},
            "retry_at": TIME,
            "pending_actions_count": {"type": "integer"},
            "unsuccessful_actions_count": {"type": "integer"},
            "started_at": TIME,
            "performed_at": TIME,
            "completed_at": TIME,
            "children": {
                "type": "array",
                "items": {"type": "integer"},
                "description": "Ids of the actions the step waited on",
            },
        },
    },
    "AttemptError": {
        "type": "object",
        "properties": {
            "event": {
                "type": "string",
                "description": "attempt_failed, step_errored, step_failed, callback_failed or completed",
            },
            "at": TIME,
            "step_id": nullable("integer"),
            "attempt": nullable("integer"),
            "next_attempt_at": nullable("string"),
            "error_class": {"type": "string"},
            "error_message": {"type": "string"},
            "traceback": nullable("string"),
        },
    },
    "ActionDetail": {
        "allOf": [
            ref("Action"),
            {
                "type": "object",
                "required": ["steps", "parents", "errors"],
                "properties": {
                    "steps": {"type": "array", "items": ref("Step")},
                    "parents": {
                        "type": "array",
                        "description": "The steps that waited on it (several when reuse attached it)",
                        "items": {
                            "type": "object",
                            "properties": {
                                "action_id": {"type": "integer"},
                                "step_id": {"type": "integer"},
                                "step_index": {"type": "integer"},
                            },
                        },
                    },
                    "errors": {
                        "type": "array",
                        "description": "Every error in its history, oldest first",
                        "items": ref("AttemptError"),
                    },
                },
            },
        ]
    },
    "TreeNode": {
        "type": "object",
        "description": (
            "An action with its steps and their children. An action reached twice is shown in full "
            'once, then as {"id", "name", "status", "repeated": true}; one cut off (too many nodes, '
            'too deep) as {"id", "truncated": true}.'
        ),
        "required": ["id"],
        "properties": {
            "id": {"type": "integer"},
            "name": {"type": "string"},
            "actor_type": {"type": "string"},
            "actor_id": {"type": "string"},
            "status": ref("ActionStatus"),
            "outbound": {"type": "boolean"},
            "started_at": TIME,
            "completed_at": TIME,
            "error": ref("ErrorSummary"),
            "repeated": {"type": "boolean"},
            "truncated": {"type": "boolean"},
            "steps": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "integer"},
                        "index": {"type": "integer"},
                        "status": {"type": "string"},
                        "children": {"type": "array", "items": ref("TreeNode")},
                    },
                },
            },
        },
    },
    "Tree": {
        "type": "object",
        "required": ["tree", "nodes", "truncated"],
        "properties": {
            "tree": ref("TreeNode"),
            "nodes": {"type": "integer", "description": "Actions loaded"},
            "truncated": {"type": "boolean"},
        },
    },
    "ActionPage": {
        "type": "object",
        "required": ["actions", "limit", "next"],
        "properties": {
            "actions": {"type": "array", "items": ref("Action")},
            "limit": {"type": "integer"},
            "next": nullable("string", description="The next page's URL; null on the last page"),
        },
    },
    "Lane": {
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "concurrency_key": {"type": "string"},
            "created_at": TIME,
            "current": {
                "oneOf": [
                    {
                        "allOf": [
                            ref("ActionSummary"),
                            {"type": "object", "properties": {"deadline_at": TIME}},
                        ]
                    },
                    {"type": "null"},
                ]
            },
            "waiting_for_completion": {
                "type": "boolean",
                "description": "Its current action is outbound: the lane moves when it is completed",
            },
            "queued": {"type": "integer", "description": "Pending actions behind the current one"},
            "links": {
                "type": "object",
                "properties": {"current": {"type": "string"}, "actions": {"type": "string"}},
            },
        },
    },
    "LanePage": {
        "type": "object",
        "required": ["lanes", "limit", "next"],
        "properties": {
            "lanes": {"type": "array", "items": ref("Lane")},
            "limit": {"type": "integer"},
            "next": nullable("string"),
        },
    },
    "CompletionRequest": {
        "type": "object",
        "description": (
            "Give action_id, or actor_type + actor_id + name (the lane's current outbound action)."
        ),
        "required": ["id", "status"],
        "additionalProperties": False,
        "properties": {
            "id": {
                "type": "string",
                "minLength": 1,
                "maxLength": 255,
                "description": "This completion's id: the same in every retry, a new one per completion",
            },
            "action_id": {"type": "integer", "minimum": 1},
            "actor_type": {"type": "string", "maxLength": 255},
            "actor_id": {"type": ["string", "integer"]},
            "name": {"type": "string", "maxLength": 255},
            "status": {"type": "string", "enum": sorted(status.COMPLETIONS)},
            "note": nullable("string", maxLength=10_000, description="Why: kept in the history and audit"),
            "payload": nullable("object", description="Kept as the action's result"),
        },
        "oneOf": [
            {"required": ["action_id"]},
            {"required": ["actor_type", "actor_id", "name"]},
        ],
    },
    "CompletionResult": {
        "type": "object",
        "required": ["id", "completed", "reason", "action_id"],
        "properties": {
            "id": {"type": "string"},
            "completed": {"type": "boolean", "description": "false: it was completed before"},
            "reason": {"type": "string", "enum": ["completed", "already_completed"]},
            "action_id": {"type": "integer"},
            "requested_status": {"type": "string"},
            "action_status": ref("ActionStatus"),
        },
    },
}


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
