"""The OpenAPI 3.1 document of the studio's JSON API and of the completion webhook, generated
from the pydantic models that validate their input (``app.api.parameters``, ``app.api.schemas``,
``app.webhooks.body``): the parameters and every schema come from the models; only each
operation's summary and its refusals are written here (the schedules' in
``app.api.openapi_schedules``). ``GET /api/openapi.json`` serves it; tests check that it
names every route of the ``api``, ``api_schedules`` and ``webhooks`` blueprints and nothing
else, and validate real answers against it.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

import engine

from ..schemas import Schemas
from ..webhooks import body as webhook_body
from ..webhooks import signal_body
from . import openapi_schedules, parameters
from . import schedule_schemas as schedule_api
from . import schemas as api
from .operation import BAD_PARAMETER, REF, Operation, error_response, json_content, ref

#: The models whose schemas are components: (model, mode). Input models are described as
#: they are validated, answers as they are sent.
COMPONENTS: list[tuple[type[BaseModel], Any]] = [
    (webhook_body.CompletionRequest, "validation"),
    (webhook_body.CompletionResult, "serialization"),
    (signal_body.SignalRequest, "validation"),
    (signal_body.SignalResult, "serialization"),
    (api.Error, "serialization"),
    (api.NotSignedIn, "serialization"),
    (api.ActionPage, "serialization"),
    (api.ActionDetail, "serialization"),
    (api.Tree, "serialization"),
    (api.LanePage, "serialization"),
    (schedule_api.ScheduleCreate, "validation"),
    (schedule_api.ScheduleEdit, "validation"),
    (schedule_api.ScheduleCommand, "validation"),
    (schedule_api.ScheduleList, "serialization"),
    (schedule_api.Schedule, "serialization"),
    (schedule_api.ScheduleChanged, "serialization"),
    (schedule_api.ScheduleEdited, "serialization"),
    (schedule_api.ScheduleTriggered, "serialization"),
    (schedule_api.ScheduleDeleted, "serialization"),
]

UNKNOWN = "No such action (not_found)"

OPERATIONS = [
    Operation(
        "/api/actions",
        "get",
        "listActions",
        "Actions matching the filters, newest first (a keyset page)",
        "actions",
        {"description": "One page", "content": json_content(ref(api.ActionPage))},
        query=parameters.ActionQuery,
        refusals={"400": BAD_PARAMETER},
    ),
    Operation(
        "/api/actions/{action_id}",
        "get",
        "getAction",
        "One action: its steps, parents, errors (tracebacks included) and the schedule that started it",
        "actions",
        {"description": "The action", "content": json_content(ref(api.ActionDetail))},
        query=parameters.NoQuery,
        refusals={"400": BAD_PARAMETER, "404": UNKNOWN},
        path_parameters=("action_id",),
    ),
    Operation(
        "/api/actions/{action_id}/tree",
        "get",
        "getActionTree",
        "The action and every action below it, nested",
        "actions",
        {"description": "The tree", "content": json_content(ref(api.Tree))},
        query=parameters.NoQuery,
        refusals={"400": BAD_PARAMETER, "404": UNKNOWN},
        path_parameters=("action_id",),
    ),
    Operation(
        "/api/lanes",
        "get",
        "listLanes",
        "Lanes (performances) with their current action and queue length, newest first",
        "lanes",
        {"description": "One page", "content": json_content(ref(api.LanePage))},
        query=parameters.LaneQuery,
        refusals={"400": BAD_PARAMETER},
    ),
    *openapi_schedules.OPERATIONS,
    Operation(
        "/api/openapi.json",
        "get",
        "getOpenApi",
        "This document",
        "meta",
        {"description": "The OpenAPI 3.1 document", "content": json_content({"type": "object"})},
    ),
    Operation(
        "/webhooks/complete",
        "post",
        "completeOutboundAction",
        "Complete an outbound action from outside (signed, idempotent by id)",
        "webhooks",
        {
            "description": "Completed, or completed before (completed: false, already_completed)",
            "headers": {
                "X-Stepwise-Replayed": {
                    "description": "true when this answer is the first delivery's, sent again",
                    "schema": {"type": "string"},
                }
            },
            "content": json_content(ref(webhook_body.CompletionResult)),
        },
        refusals={
            "400": "The body is not JSON (malformed_json)",
            "401": "missing_timestamp, bad_timestamp, missing_signature, bad_signature, stale_timestamp",
            "404": "No such action (unknown_action)",
            "409": "not_outbound; not_current (queued behind another action: give its action_id); "
            "in_progress (the same id is being handled: retry after Retry-After seconds)",
            "413": "The body is larger than 1 MiB (too_large)",
            "422": "missing_fields or invalid_fields (`fields` names each), or id_reused (the id "
            "was used for another completion)",
            "503": "STEPWISE_WEBHOOK_SECRET is not set (webhook_disabled)",
        },
        extra={
            "description": (
                'Sign `"{X-Stepwise-Timestamp}.{raw body}"` with HMAC-SHA256 and the shared secret '
                "(STEPWISE_WEBHOOK_SECRET); send `X-Stepwise-Signature: sha256=<hex>`. A timestamp "
                "more than 300 seconds from the server's clock is refused (replay). A second "
                "delivery of an id gets the first answer again, with `X-Stepwise-Replayed: true`; "
                "refusals before the engine is reached (404, 409) are not kept, so the id may be "
                "sent again later."
            ),
            "security": [{"webhookSignature": [], "webhookTimestamp": []}],
            "requestBody": {
                "required": True,
                "content": json_content(
                    ref(webhook_body.CompletionRequest),
                    {
                        "id": "dns-7f3a",
                        "action_id": 42,
                        "status": "succeeded",
                        "note": "zone live",
                        "payload": {"zone": "example.com"},
                    },
                ),
            },
        },
    ),
    Operation(
        "/webhooks/signal",
        "post",
        "sendSignal",
        "Send a signal to an action (signed; the id is the signal's key, consumed once)",
        "webhooks",
        {
            "description": "Recorded (consumed by a waiting step, or kept in the inbox), or sent before",
            "headers": {
                "X-Stepwise-Replayed": {
                    "description": "true when this id was delivered before: nothing new was recorded",
                    "schema": {"type": "string"},
                }
            },
            "content": json_content(ref(signal_body.SignalResult)),
        },
        refusals={
            "400": "The body is not JSON (malformed_json)",
            "401": "missing_timestamp, bad_timestamp, missing_signature, bad_signature, stale_timestamp",
            "404": "No such action (unknown_action)",
            "409": "The action is finished: it takes no signals (action_finished)",
            "413": "The body is larger than 1 MiB (too_large)",
            "422": "missing_fields or invalid_fields (`fields` names each), or id_reused (the id "
            "was used for another signal)",
            "503": "STEPWISE_WEBHOOK_SECRET is not set (webhook_disabled)",
        },
        extra={
            "description": (
                "Signed as /webhooks/complete. The signal is kept in the action's inbox until a "
                "step that waits for its name consumes it; a second delivery of an id returns "
                "the first signal (`replayed: true`)."
            ),
            "security": [{"webhookSignature": [], "webhookTimestamp": []}],
            "requestBody": {
                "required": True,
                "content": json_content(
                    ref(signal_body.SignalRequest),
                    {"id": "gw-81c2", "action_id": 42, "signal": "captured", "payload": {"amount": 40}},
                ),
            },
        },
    ),
]

SIGNED_IN = {
    "401": {"description": "Not signed in", "content": json_content(ref(api.NotSignedIn))},
}


def not_null(schema: dict[str, Any]) -> dict[str, Any]:
    """A parameter's schema without the null a missing parameter stands for."""
    options = [option for option in schema.get("anyOf", []) if option.get("type") != "null"]
    simpler = dict(options[0]) if len(options) == 1 else dict(schema)
    simpler.pop("description", None)  # the parameter's own
    if schema.get("default") is not None:
        simpler["default"] = schema["default"]
    return simpler


def parameters(operation: Operation) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "integer", "minimum": 1}}
        for name in operation.path_parameters
    ]
    if operation.query is None:
        return found
    properties = operation.query.model_json_schema(schema_generator=Schemas)["properties"]
    for name in operation.query.names():
        schema = properties[name]
        parameter: dict[str, Any] = {"name": name, "in": "query", "schema": not_null(schema)}
        if schema.get("description"):
            parameter["description"] = schema["description"]
        found.append(parameter)
    return found


def paths() -> dict[str, Any]:
    found: dict[str, Any] = {}
    for operation in OPERATIONS:
        responses = {operation.status: operation.answer}
        responses |= {code: error_response(text) for code, text in operation.refusals.items()}
        if operation.tag != "webhooks":
            responses |= SIGNED_IN
        described: dict[str, Any] = {
            "operationId": operation.operation_id,
            "summary": operation.summary,
            "tags": [operation.tag],
            **operation.extra,
            "responses": dict(sorted(responses.items())),
        }
        listed = parameters(operation)
        if listed:
            described["parameters"] = listed
        found.setdefault(operation.path, {})[operation.method] = described
    return found


def components() -> dict[str, Any]:
    _, top = models_json_schema(COMPONENTS, ref_template=REF, schema_generator=Schemas)
    return dict(sorted(top.get("$defs", {}).items()))


@cache
def document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Stepwise studio API",
            "version": engine.__version__,
            "description": (
                "JSON API over the actions, trees, lanes and schedules, for a signed-in session "
                "(a viewer is enough to read), and the signed completion webhook for outbound "
                "actions. The schedule commands need an operator and the session's CSRF token in "
                "the X-CSRF-Token header (every answer to a signed-in session carries it in that "
                "header). Times are UTC. Every error is JSON: {error, message}."
            ),
        },
        "tags": [
            {"name": "actions"},
            {"name": "lanes"},
            {"name": "schedules"},
            {"name": "webhooks"},
            {"name": "meta"},
        ],
        "security": [{"session": []}],
        "paths": paths(),
        "components": {
            "schemas": components(),
            "securitySchemes": {
                "session": {
                    "type": "apiKey",
                    "in": "cookie",
                    "name": "stepwise_session",
                    "description": "The studio's session cookie, after signing in at /login",
                },
                "csrf": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "X-CSRF-Token",
                    "description": "The session's CSRF token: the X-CSRF-Token header of any API answer",
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
