"""The JSON API's schedules: list and show them (rule, time zone, policies, next ticks,
last runs with their actions), and the commands create, edit, pause, resume, trigger and
delete.

The commands need an operator and the session's CSRF token in the ``X-CSRF-Token`` header
(every API answer to a signed-in session carries it: ``app.api.base``). They go through
``engine.schedules``, audited with the operator's name, as the Schedules page and
``stepwise schedules`` do. A body is a JSON object validated by a model of
``app.api.schedule_schemas``: a 400 names the field at fault.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from flask import Blueprint, jsonify, request, url_for
from pydantic import BaseModel, ValidationError
from werkzeug.wrappers import Response

from engine import schedules

from ..database import db
from ..schedules import queries as queries_schedules
from ..schemas import finite_float, json_type, problems, refuse_constant
from ..security import users
from ..security.auth import current_user, requires
from . import base, parameters, schedule_schemas
from .base import ApiError, iso, query

bp = Blueprint("api_schedules", __name__, url_prefix="/api/schedules")
base.install(bp)

#: The largest body a schedule command takes.
MAX_BODY = 64 * 1024


def run_json(run: queries_schedules.Run) -> dict[str, Any]:
    tick = run.tick
    return {
        "id": tick.id,
        "due_at": iso(tick.due_at),
        "fired_at": iso(tick.fired_at),
        "outcome": tick.outcome,
        "manual": tick.manual,
        "by": tick.by,
        "invocation_id": tick.invocation_id,
        "action_id": run.action_id,
        "action_status": run.status,
        "lag_seconds": tick.lag_seconds,
        "missed_count": tick.missed_count,
        "note": tick.note,
    }


def schedule_json(row: queries_schedules.Row) -> dict[str, Any]:
    s = row.schedule
    return {
        "id": s.id,
        "name": s.name,
        "rule": row.words,
        "cron": s.cron,
        "every_seconds": s.every_seconds,
        "timezone": s.timezone,
        "actor_type": s.actor_type,
        "actor_id": s.actor_id,
        "action": s.action,
        "arguments": list(s.arguments or []),
        "missed": s.missed,
        "overlap": s.overlap,
        "source": s.source,
        "paused": s.paused,
        "paused_at": iso(s.paused_at),
        "paused_by": s.paused_by,
        "next_fire_at": iso(s.next_fire_at),
        "upcoming": [{"at": iso(t.utc), "local": t.local} for t in row.upcoming],
        "runs": [run_json(run) for run in row.runs],
        "created_at": iso(s.created_at),
        "updated_at": iso(s.updated_at),
        "links": {
            "self": url_for("api_schedules.schedule", schedule_id=s.id),
            "page": url_for("schedules.show", schedule_id=s.id),
        },
    }


def schedule_answer(schedule_id: int) -> dict[str, Any]:
    db.session.rollback()  # a new transaction: the engine's command committed in its own
    row = queries_schedules.one(db.session(), schedule_id)
    if row is None:
        raise ApiError(404, "not_found", f"there is no schedule {schedule_id}")
    return schedule_json(row)


M = TypeVar("M", bound=BaseModel)


def body(model: type[M]) -> M:
    """The request's JSON body, validated by ``model``: a 400 names the first field at fault
    (``malformed_json`` when it is not a JSON object; an empty body is ``{}``)."""
    raw = request.get_data(cache=True)
    if len(raw) > MAX_BODY:
        raise ApiError(413, "too_large", f"the body is larger than {MAX_BODY:,} bytes")
    value: Any = {}
    if raw.strip():
        try:
            value = json.loads(raw, parse_constant=refuse_constant, parse_float=finite_float)
        except (ValueError, RecursionError) as error:
            raise ApiError(400, "malformed_json", f"the body is not JSON ({error})") from None
    if not isinstance(value, dict):
        raise ApiError(400, "malformed_json", f"the body must be a JSON object, not {json_type(value)}")
    try:
        return model.model_validate(value)
    except ValidationError as failure:
        found = problems(
            failure,
            model,
            missing=lambda field: "is required",
            unknown=lambda field: f"is not a field here: use {', '.join(model.model_fields)}",
        )
        name, problem = next(iter(found.items()))
        raise ApiError(400, "invalid_field", f"{name} {problem}", field=name, fields=found) from None


def by() -> str | None:
    user = current_user()
    return user.name if user is not None else None


def named(schedule_id: int) -> str:
    found = db.session.get(schedules.Schedule, schedule_id)
    if found is None:
        raise ApiError(404, "not_found", f"there is no schedule {schedule_id}: nothing was changed")
    name = found.name
    db.session.rollback()  # the engine's command locks the row in its own transaction
    return name


def refused(error: schedules.ScheduleError) -> ApiError:
    """An engine refusal as the API says it: gone (404), declared in code (409), else the
    field at fault (400)."""
    if isinstance(error, schedules.NoSuchSchedule):
        return ApiError(404, "not_found", f"{error}: nothing was changed")
    if isinstance(error, schedules.DeclaredInCode):
        return ApiError(409, "declared_in_code", str(error))
    return ApiError(400, "invalid_field", f"{error.field} {error}: nothing was changed", field=error.field)


@bp.get("")
def schedules_list() -> Response:
    """Every schedule (the first 500 by name) with its next ticks and its five last runs."""
    query(parameters.NoQuery)
    found = queries_schedules.rows(db.session())
    return jsonify(
        schedules=[schedule_json(row) for row in found], truncated=len(found) >= queries_schedules.LIMIT
    )


@bp.get("/<int:schedule_id>")
def schedule(schedule_id: int) -> Response:
    """One schedule with its next ticks and its fifty last runs."""
    query(parameters.NoQuery)
    return jsonify(schedule_answer(schedule_id))


@bp.post("")
@requires(users.OPERATOR)
def schedule_create() -> Response:
    """Create a schedule (as the Schedules page's form and `stepwise schedules create`)."""
    query(parameters.NoQuery)
    asked = body(schedule_schemas.ScheduleCreate)
    try:
        made = schedules.create(
            asked.name,
            actor_type=asked.actor_type,
            actor_id=str(asked.actor_id),
            action=asked.action,
            args=asked.arguments,
            cron=asked.cron,
            every=asked.every,
            timezone=asked.timezone,
            missed=asked.missed,
            overlap=asked.overlap,
            by=by(),
            reason=asked.reason,
        )
    except schedules.ScheduleError as error:
        db.session.rollback()
        raise refused(error) from None
    response = jsonify(schedule_answer(made.id))
    response.status_code = 201
    response.headers["Location"] = url_for("api_schedules.schedule", schedule_id=made.id)
    return response


@bp.patch("/<int:schedule_id>")
@requires(users.OPERATOR)
def schedule_edit(schedule_id: int) -> Response:
    """Change the fields given, the others stay; a new rule ticks from now (no back-fire)."""
    query(parameters.NoQuery)
    asked = body(schedule_schemas.ScheduleEdit)
    given = asked.model_fields_set
    name = named(schedule_id)
    try:
        edited = schedules.edit(
            name,
            cron=asked.cron if "cron" in given else schedules.UNSET,
            every=asked.every if "every" in given else schedules.UNSET,
            timezone=asked.timezone,
            args=asked.arguments,
            missed=asked.missed,
            overlap=asked.overlap,
            by=by(),
            reason=asked.reason,
        )
    except schedules.ScheduleError as error:
        raise refused(error) from None
    return jsonify(
        changed=edited.changed,
        changes={key: {"before": old, "after": new} for key, (old, new) in edited.changes.items()},
        schedule=schedule_answer(schedule_id),
    )


def switch(schedule_id: int, command: Any) -> Response:
    query(parameters.NoQuery)
    asked = body(schedule_schemas.ScheduleCommand)
    name = named(schedule_id)
    try:
        changed = command(name, by=by(), reason=asked.reason)
    except schedules.ScheduleError as error:
        raise refused(error) from None
    return jsonify(changed=bool(changed), schedule=schedule_answer(schedule_id))


@bp.post("/<int:schedule_id>/pause")
@requires(users.OPERATOR)
def schedule_pause(schedule_id: int) -> Response:
    """Stop its ticks until resumed; changed is false when it was paused already."""
    return switch(schedule_id, schedules.pause)


@bp.post("/<int:schedule_id>/resume")
@requires(users.OPERATOR)
def schedule_resume(schedule_id: int) -> Response:
    """Tick again from now (the ticks due while paused are not run)."""
    return switch(schedule_id, schedules.resume)


@bp.post("/<int:schedule_id>/trigger")
@requires(users.OPERATOR)
def schedule_trigger(schedule_id: int) -> Response:
    """Run its action now (a manual run), whatever its overlap policy and even while paused."""
    query(parameters.NoQuery)
    asked = body(schedule_schemas.ScheduleCommand)
    name = named(schedule_id)
    try:
        tick = schedules.trigger(name, by=by(), reason=asked.reason)
    except schedules.NoSuchSchedule as error:
        raise refused(error) from None
    except schedules.ScheduleError as error:
        raise ApiError(409, "not_triggered", f"{error}: nothing was started") from None
    return jsonify(
        run=run_json(queries_schedules.Run(tick, None, None)), schedule=schedule_answer(schedule_id)
    )


@bp.delete("/<int:schedule_id>")
@requires(users.OPERATOR)
def schedule_delete(schedule_id: int) -> Response:
    """Delete it and its ticks (the actions it started stay; the audit keeps what it was)."""
    query(parameters.NoQuery)
    asked = body(schedule_schemas.ScheduleCommand)
    name = named(schedule_id)
    try:
        schedules.delete(name, by=by(), reason=asked.reason)
    except schedules.ScheduleError as error:
        raise refused(error) from None
    return jsonify(deleted=name)
