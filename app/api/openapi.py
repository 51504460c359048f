"""The OpenAPI 3.1 document of the studio's JSON API and of the completion webhook, generated
from the pydantic models that validate their input (``app.api.schemas``,
``app.webhooks.body``): the parameters and every schema come from the models; only each
operation's summary and its refusals are written here. ``GET /api/openapi.json`` serves it;
tests check that it names every route of the ``api`` and ``webhooks`` blueprints and nothing
else, and validate real answers against it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

import engine

from ..schemas import Schemas
from ..webhooks import body as webhook_body
from ..webhooks import signal_body
from . import schemas as api

REF = "#/components/schemas/{model}"

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
    (api.ScheduleCreate, "validation"),
    (api.ScheduleEdit, "validation"),
    (api.ScheduleCommand, "validation"),
    (api.ScheduleList, "serialization"),
    (api.Schedule, "serialization"),
    (api.ScheduleChanged, "serialization"),
    (api.ScheduleEdited, "serialization"),
    (api.ScheduleTriggered, "serialization"),
    (api.ScheduleDeleted, "serialization"),
]


def ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": REF.format(model=model.__name__)}


def json_content(schema: dict[str, Any], example: Any = None) -> dict[str, Any]:
    media: dict[str, Any] = {"schema": schema}
    if example is not None:
        media["example"] = example
    return {"application/json": media}


def error_response(description: str) -> dict[str, Any]:
    return {"description": description, "content": json_content(ref(api.Error))}


@dataclass(frozen=True)
class Operation:
    """What the document says of one route beyond its models."""

    path: str
    method: str
    operation_id: str
    summary: str
    tag: str
    answer: dict[str, Any]
    query: type[api.Query] | None = None
    refusals: dict[str, str] = field(default_factory=dict)
    path_parameters: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)
    #: The success's status code.
    status: str = "200"


BAD_PARAMETER = "A query parameter is unknown or malformed (bad_parameter: `parameter` names it)"
UNKNOWN = "No such action (not_found)"
UNKNOWN_SCHEDULE = "No such schedule (not_found): nothing was changed"
BAD_FIELD = (
    "The body is not a JSON object (malformed_json), a field is unknown or wrong (invalid_field: "
    "`field` names it), or the X-CSRF-Token header is missing or wrong"
)
OPERATOR_ONLY = "Signed in as a viewer: only an operator may change schedules"
TOO_LARGE = "The body is larger than 64 KiB (too_large)"
#: The schedule commands: an operator's session and its CSRF token.
COMMAND_SECURITY: dict[str, Any] = {"security": [{"session": [], "csrf": []}]}


def command_body(model: type[BaseModel], example: dict[str, Any], required: bool = False) -> dict[str, Any]:
    return {"requestBody": {"required": required, "content": json_content(ref(model), example)}}


def schedule_command(verb: str, operation_id: str, summary: str, description: str) -> Operation:
    return Operation(
        f"/api/schedules/{{schedule_id}}/{verb}",
        "post",
        operation_id,
        summary,
        "schedules",
        {"description": description, "content": json_content(ref(api.ScheduleChanged))},
        query=api.NoQuery,
        refusals={"400": BAD_FIELD, "403": OPERATOR_ONLY, "404": UNKNOWN_SCHEDULE, "413": TOO_LARGE},
        path_parameters=("schedule_id",),
        extra={**COMMAND_SECURITY, **command_body(api.ScheduleCommand, {"reason": "maintenance"})},
    )


OPERATIONS = [
    Operation(
        "/api/actions",
        "get",
        "listActions",
        "Actions matching the filters, newest first (a keyset page)",
        "actions",
        {"description": "One page", "content": json_content(ref(api.ActionPage))},
        query=api.ActionQuery,
        refusals={"400": BAD_PARAMETER},
    ),
    Operation(
        "/api/actions/{action_id}",
        "get",
        "getAction",
        "One action with its steps, parents and errors (tracebacks included)",
        "actions",
        {"description": "The action", "content": json_content(ref(api.ActionDetail))},
        query=api.NoQuery,
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
        query=api.NoQuery,
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
        query=api.LaneQuery,
        refusals={"400": BAD_PARAMETER},
    ),
    Operation(
        "/api/schedules",
        "get",
        "listSchedules",
        "Every schedule (the first 500 by name): rule, time zone, policies, next ticks, five last runs",
        "schedules",
        {"description": "The schedules", "content": json_content(ref(api.ScheduleList))},
        query=api.NoQuery,
        refusals={"400": BAD_PARAMETER},
    ),
    Operation(
        "/api/schedules",
        "post",
        "createSchedule",
        "Create a schedule (cron or every), audited with the operator's name",
        "schedules",
        {
            "description": "Created (Location: the schedule)",
            "content": json_content(ref(api.Schedule)),
        },
        query=api.NoQuery,
        refusals={
            "400": BAD_FIELD + "; a taken name is invalid_field name",
            "403": OPERATOR_ONLY,
            "413": TOO_LARGE,
        },
        extra={
            **COMMAND_SECURITY,
            **command_body(
                api.ScheduleCreate,
                {
                    "name": "nightly-report",
                    "cron": "0 2 * * *",
                    "timezone": "Europe/Paris",
                    "actor_type": "Report",
                    "actor_id": "main",
                    "action": "generate",
                    "arguments": ["daily"],
                    "missed": "run_once",
                },
                required=True,
            ),
        },
        status="201",
    ),
    Operation(
        "/api/schedules/{schedule_id}",
        "get",
        "getSchedule",
        "One schedule with its next ticks and fifty last runs (the actions they started)",
        "schedules",
        {"description": "The schedule", "content": json_content(ref(api.Schedule))},
        query=api.NoQuery,
        refusals={"400": BAD_PARAMETER, "404": "No such schedule (not_found)"},
        path_parameters=("schedule_id",),
    ),
    Operation(
        "/api/schedules/{schedule_id}",
        "patch",
        "editSchedule",
        "Change a schedule's rule, time zone, arguments or policies in place (the others stay)",
        "schedules",
        {
            "description": "Edited (changed: false when it was so already)",
            "content": json_content(ref(api.ScheduleEdited)),
        },
        query=api.NoQuery,
        refusals={
            "400": BAD_FIELD,
            "403": OPERATOR_ONLY,
            "404": UNKNOWN_SCHEDULE,
            "413": TOO_LARGE,
            "409": "Declared in code with engine.schedule (declared_in_code): change it in the code",
        },
        path_parameters=("schedule_id",),
        extra={
            "description": (
                "Giving cron or every sets the rule (the other is cleared); a new rule or time zone "
                "recomputes the next tick from now, so no tick due before the edit runs. Audited "
                "with the fields before and after."
            ),
            **COMMAND_SECURITY,
            **command_body(api.ScheduleEdit, {"every": 3600, "reason": "hourly is enough"}, required=True),
        },
    ),
    Operation(
        "/api/schedules/{schedule_id}",
        "delete",
        "deleteSchedule",
        "Delete a schedule and its ticks (the actions it started stay; the audit keeps what it was)",
        "schedules",
        {"description": "Deleted", "content": json_content(ref(api.ScheduleDeleted))},
        query=api.NoQuery,
        refusals={"400": BAD_FIELD, "403": OPERATOR_ONLY, "404": UNKNOWN_SCHEDULE, "413": TOO_LARGE},
        path_parameters=("schedule_id",),
        extra={**COMMAND_SECURITY, **command_body(api.ScheduleCommand, {"reason": "retired"})},
    ),
    schedule_command(
        "pause", "pauseSchedule", "Pause a schedule: its ticks stop", "Paused (changed: false if it was)"
    ),
    schedule_command(
        "resume",
        "resumeSchedule",
        "Resume a schedule from now: the ticks due while paused are not run",
        "Resumed (changed: false if it was not paused)",
    ),
    Operation(
        "/api/schedules/{schedule_id}/trigger",
        "post",
        "triggerSchedule",
        "Run a schedule's action now (a manual run), whatever its overlap policy, even while paused",
        "schedules",
        {
            "description": "Triggered: the run and its invocation",
            "content": json_content(ref(api.ScheduleTriggered)),
        },
        query=api.NoQuery,
        refusals={
            "400": BAD_FIELD,
            "403": OPERATOR_ONLY,
            "404": UNKNOWN_SCHEDULE,
            "413": TOO_LARGE,
            "409": "Triggered at this very instant already (not_triggered)",
        },
        path_parameters=("schedule_id",),
        extra={**COMMAND_SECURITY, **command_body(api.ScheduleCommand, {"reason": "rerun after the fix"})},
    ),
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
