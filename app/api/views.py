"""The JSON API: actions (filtered and paged like the list), one action with its steps and
errors, its tree, the lanes, and the OpenAPI document describing them and the schedules'
routes (``app.api.openapi``; the schedules are ``app.api.schedule_views``).

A signed-in session reaches it (a viewer is enough to read); without one every answer is
401 JSON, never a redirect (``app.views.JSON_PATHS``). Lists are keyset pages, newest first: follow
``next`` (``before=<the last id>``), ``limit`` at most ``MAX_LIMIT``. The query string is
validated by the models of ``app.api.parameters`` (the OpenAPI document's, too): a
parameter that is unknown or malformed is a 400 that names it.
"""

from __future__ import annotations

from typing import Any, NoReturn

from flask import Blueprint, jsonify, request, url_for
from werkzeug.wrappers import Response

from engine.commands import ActionFilter
from engine.errors import EngineError
from engine.models import Action, ActionEvent, Invocation, Performance, Signal, Step

from ..action import queries_attempts, queries_signals
from ..database import db
from ..schedules import queries as queries_schedules
from . import base, openapi, parameters
from . import queries as queries_api
from . import schemas as schemas
from .base import ApiError, iso, query

bp = Blueprint("api", __name__, url_prefix="/api")

#: Levels of a tree answer below the action asked for; deeper actions are cut off.
MAX_TREE_DEPTH = 100
MAX_LIMIT = parameters.MAX_LIMIT

base.install(bp)


def not_found(action_id: int) -> NoReturn:
    raise ApiError(404, "not_found", f"there is no action {action_id}")


def next_url(endpoint: str, before: int | None) -> str | None:
    if before is None:
        return None
    args: dict[str, Any] = {k: v for k, v in request.args.items() if k != "before"}
    args["before"] = before
    return url_for(endpoint, **args)


# --- shapes ----------------------------------------------------------------------------------


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


def started_by_json(tick: queries_schedules.StartedBy | None) -> dict[str, Any] | None:
    if tick is None:
        return None
    return {
        "schedule_id": tick.schedule_id,
        "schedule": tick.schedule,
        "tick_id": tick.tick_id,
        "due_at": iso(tick.due_at),
        "local": tick.local,
        "timezone": tick.timezone,
        "manual": tick.manual,
        "by": tick.by,
        "links": {
            "schedule": url_for("api_schedules.schedule", schedule_id=tick.schedule_id),
            "page": url_for("schedules.show", schedule_id=tick.schedule_id),
        },
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
    asked = query(parameters.ActionQuery)
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
    """One action with its steps (and the children each waited on), its parents, every
    error in its history (tracebacks included) and the schedule tick that started it."""
    query(parameters.NoQuery)
    session = db.session()
    found = queries_api.action(session, action_id)
    if found is None:
        not_found(action_id)
    steps = queries_api.steps_of(session, [found.id])[found.id]
    names = step_names(found)
    children = queries_api.children_of(session, [s.id for s in steps])
    # A schedule invokes roots: only a root can have been started by one (as its page says).
    started = queries_schedules.started_by(session, found.id) if found.root else None
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
            "started_by": started_by_json(started),
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
    query(parameters.NoQuery)
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
    asked = query(parameters.LaneQuery)
    where = queries_api.LaneFilter(concurrency_key=asked.concurrency_key, outbound=asked.outbound)
    session = db.session()
    page = queries_api.lanes_page(session, where, asked.before, asked.limit)
    queued = queries_api.queued_counts(session, [lane.id for lane, _ in page.items])
    return jsonify(
        lanes=[lane_json(lane, current, queued[lane.id]) for lane, current in page.items],
        limit=asked.limit,
        next=next_url("api.lanes", page.next_before),
    )


@bp.get("/openapi.json")
def openapi_document() -> Response:
    """The OpenAPI 3.1 document of this API and of the completion webhook."""
    return jsonify(openapi.document())
