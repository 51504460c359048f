"""The JSON API: actions (filtered and paged like the list), one action with its steps and
errors, its tree, the lanes, the schedules and their commands, and the OpenAPI document
describing them (``app.api.openapi``).

A signed-in session reaches it (a viewer is enough to read); without one every answer is
401 JSON, never a redirect (``app.views.JSON_PATHS``). The schedule commands (create, edit,
pause, resume, trigger, delete) need an operator and, like every studio form, the session's
CSRF token, sent in the ``X-CSRF-Token`` header: every API answer to a signed-in session
carries it in that header. They go through ``engine.schedules``, audited with the operator's
name, as the Schedules page and ``stepwise schedules`` do. Lists are keyset pages, newest first: follow
``next`` (``before=<the last id>``), ``limit`` at most ``MAX_LIMIT``. The query string is
validated by the models of ``app.api.schemas`` (the OpenAPI document's, too): a
parameter that is unknown or malformed is a 400 that names it.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, NoReturn, TypeVar, cast

from flask import Blueprint, g, jsonify, request, url_for
from pydantic import BaseModel, ValidationError
from werkzeug.wrappers import Response

from engine import schedules
from engine.commands import ActionFilter
from engine.errors import EngineError
from engine.models import Action, ActionEvent, Invocation, Performance, Signal, Step

from ..action import queries_attempts, queries_signals
from ..database import db
from ..schedules import queries as queries_schedules
from ..schemas import finite_float, json_type, problems, refuse_constant
from ..security import csrf, users
from ..security.auth import current_user, requires
from . import openapi
from . import queries as queries_api
from . import schemas as schemas

bp = Blueprint("api", __name__, url_prefix="/api")

#: Levels of a tree answer below the action asked for; deeper actions are cut off.
MAX_TREE_DEPTH = 100
MAX_LIMIT = schemas.MAX_LIMIT


class ApiError(Exception):
    def __init__(self, code: int, error: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.code, self.error, self.message, self.extra = code, error, message, extra


@bp.errorhandler(ApiError)
def api_error(error: ApiError) -> Response:
    response = jsonify({"error": error.error, "message": error.message, **error.extra})
    response.status_code = error.code
    return response


@bp.errorhandler(schemas.BadParameter)
def bad_parameter(error: schemas.BadParameter) -> Response:
    return api_error(ApiError(400, "bad_parameter", str(error), parameter=error.name))


def not_found(action_id: int) -> NoReturn:
    raise ApiError(404, "not_found", f"there is no action {action_id}")


Q = TypeVar("Q", bound=schemas.Query)


def query(model: type[Q]) -> Q:
    """The query string, validated by ``model`` (``BadParameter``, a 400, names the first
    parameter at fault)."""
    return cast(Q, model.parse(request.args.to_dict()))


def next_url(endpoint: str, before: int | None) -> str | None:
    if before is None:
        return None
    args: dict[str, Any] = {k: v for k, v in request.args.items() if k != "before"}
    args["before"] = before
    return url_for(endpoint, **args)


# --- shapes ----------------------------------------------------------------------------------


def iso(value: datetime | None) -> str | None:
    """Times are naive UTC in the database; the API says so with a Z."""
    return value.isoformat() + "Z" if value is not None else None


def action_summary(action: Action) -> dict[str, Any]:
    return {
        "id": action.id,
        "name": action.name,
        "actor_type": action.actor_type,
        "actor_id": action.actor_id,
        "status": action.status,
        "outbound": action.outbound,
        "started_at": iso(action.started_at),
        "completed_at": iso(action.completed_at),
    }


def action_json(action: Action) -> dict[str, Any]:
    return {
        **action_summary(action),
        "arguments": action.arguments_json,
        "root": action.root,
        "tree_id": action.tree_id,
        "concurrency_key": action.concurrency_key,
        "checksum_key": action.checksum_key,
        "checksum": action.checksum,
        "current_step_index": action.current_step_index,
        "timeout_seconds": action.timeout_seconds,
        "deadline_at": iso(action.deadline_at),
        "superseded_by_id": action.superseded_by_id,
        "result": action.result,
        "error": (
            {"class": action.error_class, "message": action.error_message} if action.error_class else None
        ),
        "created_at": iso(action.created_at),
        "updated_at": iso(action.updated_at),
        "links": {
            "self": url_for("api.action", action_id=action.id),
            "tree": url_for("api.tree", action_id=action.id),
        },
    }


def step_names(action: Action) -> list[str]:
    """The names of the action's steps, or none when this process does not know its definition."""
    try:
        return action.definition.step_names()
    except EngineError:
        return []


def step_json(step: Step, children: list[int], names: list[str] | None = None) -> dict[str, Any]:
    return {
        "id": step.id,
        "index": step.definition_index,
        "name": names[step.definition_index] if names and 0 <= step.definition_index < len(names) else None,
        "visit": step.visit,
        "result": step.result,
        "decision": step.decision,
        "status": step.status,
        "attempt": step.attempt,
        "retry_at": iso(step.retry_at),
        "pending_actions_count": step.pending_actions_count,
        "unsuccessful_actions_count": step.unsuccessful_actions_count,
        "started_at": iso(step.started_at),
        "performed_at": iso(step.performed_at),
        "completed_at": iso(step.completed_at),
        "children": children,
    }


def signal_json(signal: Signal) -> dict[str, Any]:
    return {
        "id": signal.id,
        "name": signal.name,
        "payload": signal.payload,
        "sent_by": signal.sent_by,
        "note": signal.note,
        "sent_at": iso(signal.created_at),
        "consumed_at": iso(signal.consumed_at),
        "consumed_by_wait_id": signal.consumed_by_id,
    }


def wait_json(wait: Invocation) -> dict[str, Any]:
    return {
        "id": wait.id,
        "step_id": wait.parent_step_id,
        "signals": list(wait.arguments_json or []),
        "since": iso(wait.created_at),
        "until": iso(wait.due_at),
    }


def error_json(event: ActionEvent) -> dict[str, Any]:
    data = event.data or {}
    return {
        "event": event.event,
        "at": iso(event.at),
        "step_id": event.step_id,
        "attempt": data.get("attempt"),
        "next_attempt_at": data.get("next_attempt_at"),
        "error_class": data.get("error_class"),
        "error_message": data.get("error_message"),
        "traceback": data.get("traceback"),
    }


def lane_json(lane: Performance, current: Action | None, queued: int) -> dict[str, Any]:
    return {
        "id": lane.id,
        "concurrency_key": lane.concurrency_key,
        "created_at": iso(lane.created_at),
        "current": (
            {**action_summary(current), "deadline_at": iso(current.deadline_at)}
            if current is not None
            else None
        ),
        "waiting_for_completion": lane.outbound_complete_key is not None,
        "queued": queued,
        "links": {
            "current": url_for("api.action", action_id=lane.action_id),
            "actions": url_for("api.actions", concurrency_key=lane.concurrency_key),
        },
    }


# --- the endpoints ---------------------------------------------------------------------------


@bp.get("/actions")
def actions() -> Response:
    """Actions matching the filters, newest first, one keyset page."""
    asked = query(schemas.ActionQuery)
    where = ActionFilter(
        status=asked.status,
        name=asked.name,
        actor_type=asked.actor_type,
        actor_id=asked.actor_id,
        concurrency_key=asked.concurrency_key,
        roots_only=bool(asked.roots_only),
        created_after=asked.created_after,
        created_before=asked.created_before,
        search=asked.search,
    )
    page = queries_api.actions_page(db.session(), where, asked.before, asked.limit)
    return jsonify(
        actions=[action_json(a) for a in page.items],
        limit=asked.limit,
        next=next_url("api.actions", page.next_before),
    )


@bp.get("/actions/<int:action_id>")
def action(action_id: int) -> Response:
    """One action with its steps (and the children each waited on), its parents and every
    error in its history, tracebacks included."""
    query(schemas.NoQuery)
    session = db.session()
    found = queries_api.action(session, action_id)
    if found is None:
        not_found(action_id)
    steps = queries_api.steps_of(session, [found.id])[found.id]
    names = step_names(found)
    children = queries_api.children_of(session, [s.id for s in steps])
    return jsonify(
        {
            **action_json(found),
            "error": (
                {
                    "class": found.error_class,
                    "message": found.error_message,
                    "traceback": found.error_traceback,
                }
                if found.error_class
                else None
            ),
            "steps": [step_json(s, children[s.id], names) for s in steps],
            "compensations": queries_api.compensations_of(session, found),
            "inbox": [signal_json(signal) for signal in queries_signals.inbox_of(session, found.id)],
            "waits": [wait_json(wait) for wait in queries_api.open_waits_of(session, found.id)],
            "parents": [
                {"action_id": p.action_id, "step_id": p.step_id, "step_index": p.step_index}
                for p in queries_api.parents_of(session, found.id)
            ],
            "errors": [error_json(e) for e in queries_api.errors_of(session, found.id)],
            "attempts": [
                queries_attempts.attempt_json(a) for a in queries_attempts.of_action(session, found)
            ],
        }
    )


@bp.get("/actions/<int:action_id>/tree")
def tree(action_id: int) -> Response:
    """The action and everything below it, nested: node -> steps -> children (nodes). An
    action reached a second time (reuse attached it twice) is shown once in full, then as
    ``{"id", "repeated": true}``."""
    query(schemas.NoQuery)
    session = db.session()
    found = queries_api.action(session, action_id)
    if found is None:
        not_found(action_id)
    loaded = queries_api.tree(session, found)
    nested, cut = nest(loaded)
    return jsonify(tree=nested, nodes=len(loaded.actions), truncated=loaded.truncated or cut)


def node_json(action: Action) -> dict[str, Any]:
    node = action_summary(action)
    node["error"] = (
        {"class": action.error_class, "message": action.error_message} if action.error_class else None
    )
    return node


def nest(loaded: queries_api.Tree) -> tuple[dict[str, Any], bool]:
    """The nested form, built depth first in document order without recursion (a tree may
    be deep), and whether some actions were cut off (``{"id", "truncated": true}``: past the
    node limit or too deep). The first occurrence of an action is shown in full."""
    cut = False
    shown: set[int] = set()
    root: dict[str, Any] = {}
    stack: list[tuple[int, dict[str, Any], int]] = [(loaded.root_id, root, 0)]
    while stack:
        action_id, node, depth = stack.pop()
        action = loaded.actions.get(action_id)
        if action is None or depth > MAX_TREE_DEPTH:
            node.update(id=action_id, truncated=True)
            cut = True
            continue
        if action_id in shown:
            node.update(id=action_id, name=action.name, status=action.status, repeated=True)
            continue
        shown.add(action_id)
        node.update(node_json(action))
        node["steps"] = []
        below: list[tuple[int, dict[str, Any], int]] = []
        for step in loaded.steps.get(action_id, []):
            kids: list[dict[str, Any]] = []
            node["steps"].append(
                {"id": step.id, "index": step.definition_index, "status": step.status, "children": kids}
            )
            for child_id in loaded.children.get(step.id, []):
                kid: dict[str, Any] = {}
                kids.append(kid)
                below.append((child_id, kid, depth + 1))
        stack.extend(reversed(below))  # the first child is taken next
    return root, cut


@bp.get("/lanes")
def lanes() -> Response:
    """Lanes (performances) with their current action and how many wait behind it."""
    asked = query(schemas.LaneQuery)
    where = queries_api.LaneFilter(concurrency_key=asked.concurrency_key, outbound=asked.outbound)
    session = db.session()
    page = queries_api.lanes_page(session, where, asked.before, asked.limit)
    queued = queries_api.queued_counts(session, [lane.id for lane, _ in page.items])
    return jsonify(
        lanes=[lane_json(lane, current, queued[lane.id]) for lane, current in page.items],
        limit=asked.limit,
        next=next_url("api.lanes", page.next_before),
    )


# --- schedules -------------------------------------------------------------------------------

#: The largest body a schedule command takes.
MAX_BODY = 64 * 1024


@bp.after_request
def csrf_header(response: Response) -> Response:
    """A signed-in session's CSRF token, which the API's commands need in X-CSRF-Token."""
    if g.get("user") is not None:
        response.headers[csrf.HEADER] = csrf.token()
    return response


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
            "self": url_for("api.schedule", schedule_id=s.id),
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


@bp.get("/schedules")
def schedules_list() -> Response:
    """Every schedule (the first 500 by name) with its next ticks and its five last runs."""
    query(schemas.NoQuery)
    found = queries_schedules.rows(db.session())
    return jsonify(
        schedules=[schedule_json(row) for row in found], truncated=len(found) >= queries_schedules.LIMIT
    )


@bp.get("/schedules/<int:schedule_id>")
def schedule(schedule_id: int) -> Response:
    """One schedule with its next ticks and its fifty last runs."""
    query(schemas.NoQuery)
    return jsonify(schedule_answer(schedule_id))


@bp.post("/schedules")
@requires(users.OPERATOR)
def schedule_create() -> Response:
    """Create a schedule (as the Schedules page's form and `stepwise schedules create`)."""
    query(schemas.NoQuery)
    asked = body(schemas.ScheduleCreate)
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
    response.headers["Location"] = url_for("api.schedule", schedule_id=made.id)
    return response


@bp.patch("/schedules/<int:schedule_id>")
@requires(users.OPERATOR)
def schedule_edit(schedule_id: int) -> Response:
    """Change the fields given, the others stay; a new rule ticks from now (no back-fire)."""
    query(schemas.NoQuery)
    asked = body(schemas.ScheduleEdit)
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
    query(schemas.NoQuery)
    asked = body(schemas.ScheduleCommand)
    name = named(schedule_id)
    try:
        changed = command(name, by=by(), reason=asked.reason)
    except schedules.ScheduleError as error:
        raise refused(error) from None
    return jsonify(changed=bool(changed), schedule=schedule_answer(schedule_id))


@bp.post("/schedules/<int:schedule_id>/pause")
@requires(users.OPERATOR)
def schedule_pause(schedule_id: int) -> Response:
    """Stop its ticks until resumed; changed is false when it was paused already."""
    return switch(schedule_id, schedules.pause)


@bp.post("/schedules/<int:schedule_id>/resume")
@requires(users.OPERATOR)
def schedule_resume(schedule_id: int) -> Response:
    """Tick again from now (the ticks due while paused are not run)."""
    return switch(schedule_id, schedules.resume)


@bp.post("/schedules/<int:schedule_id>/trigger")
@requires(users.OPERATOR)
def schedule_trigger(schedule_id: int) -> Response:
    """Run its action now (a manual run), whatever its overlap policy and even while paused."""
    query(schemas.NoQuery)
    asked = body(schemas.ScheduleCommand)
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


@bp.delete("/schedules/<int:schedule_id>")
@requires(users.OPERATOR)
def schedule_delete(schedule_id: int) -> Response:
    """Delete it and its ticks (the actions it started stay; the audit keeps what it was)."""
    query(schemas.NoQuery)
    asked = body(schemas.ScheduleCommand)
    name = named(schedule_id)
    try:
        schedules.delete(name, by=by(), reason=asked.reason)
    except schedules.ScheduleError as error:
        raise refused(error) from None
    return jsonify(deleted=name)


@bp.get("/openapi.json")
def openapi_document() -> Response:
    """The OpenAPI 3.1 document of this API and of the completion webhook."""
    return jsonify(openapi.document())
