"""What the OpenAPI document says of the schedules' routes (``app/api/schedule_views.py``)
beyond their models (``app/api/schedule_schemas.py``): summaries, refusals, the commands'
security (an operator's session and its CSRF token) and their bodies' examples."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from . import parameters
from . import schedule_schemas as api
from .operation import BAD_PARAMETER, Operation, json_content, ref

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
        query=parameters.NoQuery,
        refusals={"400": BAD_FIELD, "403": OPERATOR_ONLY, "404": UNKNOWN_SCHEDULE, "413": TOO_LARGE},
        path_parameters=("schedule_id",),
        extra={**COMMAND_SECURITY, **command_body(api.ScheduleCommand, {"reason": "maintenance"})},
    )


OPERATIONS = [
    Operation(
        "/api/schedules",
        "get",
        "listSchedules",
        "Every schedule (the first 500 by name): rule, time zone, policies, next ticks, five last runs",
        "schedules",
        {"description": "The schedules", "content": json_content(ref(api.ScheduleList))},
        query=parameters.NoQuery,
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
        query=parameters.NoQuery,
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
        query=parameters.NoQuery,
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
        query=parameters.NoQuery,
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
        query=parameters.NoQuery,
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
        query=parameters.NoQuery,
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
]
