"""Catalog, the visual workflow studio: every registered definition drawn as a diagram of its
steps (with the child actions they call) and its options; and a form to start an action on
an actor with arguments (operators only).
"""

from __future__ import annotations

import json
from typing import Any, NoReturn

from flask import Blueprint, abort, request, url_for
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from werkzeug.wrappers import Response

import engine
from engine import audit, history, registry
from engine.errors import ActorNotFound, ArgumentError, EngineError
from engine.models import Action

from ..database import db
from ..overview.chart import WINDOWS
from ..overview.views import TILE_WINDOWS, definition_stats
from ..security import users
from ..security.auth import current_user, requires
from ..views import command_response, links, render
from . import definitions as catalog

bp = Blueprint("catalog", __name__, url_prefix="/catalog")
bp.context_processor(links)

NOTHING_STARTED = "Nothing was started."
JSON_KINDS: dict[type, str] = {
    dict: "an object",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "true or false",
}
JSON_KINDS[type(None)] = "null"


def start_form(actor_type: str = "", name: str = "", **values: str) -> dict[str, Any]:
    """The start form's choices and values."""
    return {
        "actor_types": catalog.actor_types(),
        "action_names": sorted({d.name for d in catalog.definitions()}),
        "form": {"actor_type": actor_type, "name": name, "actor_id": "", "arguments": "[]", **values},
    }


#: The window of the runs per definition unless the URL names one.
RUNS_WINDOW = "24h"


def runs(actor_type: str | None = None, name: str | None = None) -> dict[str, Any]:
    """Runs per definition in the window (``?window=1h|24h|7d``), shared with the overview's
    cache; only those of one definition when ``name`` is given."""
    key = request.args.get("window", "")
    window = WINDOWS[key if key in TILE_WINDOWS else RUNS_WINDOW]
    (stats, sample_full), at = definition_stats(window)
    if name is not None:
        stats = [s for s in stats if s.actor_type == actor_type and s.name == name]
    return {
        "stats": stats,
        "stats_sample_full": sample_full,
        "stats_at": at,
        "window": window,
        "tile_windows": [WINDOWS[k] for k in TILE_WINDOWS],
    }


@bp.get("/")
def index() -> Response:
    """Every registered definition, grouped by actor type, each drawn as a diagram."""
    shapes = catalog.shapes()
    groups: dict[str, list[catalog.Shape]] = {}
    for shape in shapes:
        groups.setdefault(shape.actor_type, []).append(shape)
    return render("catalog/index.html", groups=groups, count=len(shapes), **start_form(), **runs())


@bp.get("/<actor_type>/<name>")
def show(actor_type: str, name: str) -> Response:
    """One definition, its diagram, the form to start it, and its latest actions."""
    definition = catalog.find(actor_type, name)
    if definition is None:
        abort(404, description=f"No action {name!r} is registered on {actor_type!r}: see the catalog.")
    latest = db.session.scalars(
        select(Action)
        .where(Action.name == name, Action.actor_type == actor_type)
        .order_by(Action.id.desc())
        .limit(10)
    ).all()
    return render(
        "catalog/show.html",
        shape=catalog.shape(definition),
        latest=latest,
        **start_form(actor_type, name),
        **runs(actor_type, name),
    )


@bp.post("/start")
@requires(users.OPERATOR)
def start() -> Response:
    """Invoke an action on an actor, as ``engine.later`` would: a worker admits it."""
    actor_type = request.form.get("actor_type", "").strip()
    actor_id = request.form.get("actor_id", "").strip()
    name = request.form.get("name", "").strip()
    raw = request.form.get("arguments", "").strip() or "[]"
    arguments = parse_arguments(raw)
    cls = registry.actor_classes().get(actor_type)
    if cls is None:
        known = ", ".join(catalog.actor_types()) or "none"
        refuse(f"There is no actor type {actor_type!r} in this studio (it knows: {known}).")
    if not actor_id:
        refuse(f"Say which {actor_type} to start it on: the actor id is empty.")
    definition = registry.find(cls, name) if name and not name.startswith("_") else None
    if definition is None:
        known = ", ".join(catalog.names_for(actor_type)) or "none"
        refuse(f"{actor_type} has no registered action {name!r} (its actions: {known}).")
    problem = catalog.arguments_problem(definition, arguments)
    if problem is not None:
        refuse(f"The arguments do not fit: {problem}.")
    user = current_user()
    by = user.name if user is not None else None
    with engine.new_session() as session:
        try:
            actor = registry.load_actor(session, actor_type, actor_id)
        except (ActorNotFound, SQLAlchemyError):
            session.rollback()
            refuse(f"There is no {actor_type} with id {actor_id!r}.")
        try:
            invocation = engine.later(actor, name, *arguments)
        except (ArgumentError, EngineError) as error:
            session.rollback()
            refuse(f"{name} cannot be started with these arguments: {error}.")
        audit.record(
            session,
            "start",
            f"invocation:{invocation.id}",
            cause=history.OPERATOR,
            by=by,
            result="invoked",
            actor=f"{actor_type}/{actor_id}",
            action=name,
            arguments=arguments,
        )
        session.commit()
        invocation_id = invocation.id
    message = (
        f"Started {name} on {actor_type}/{actor_id} (invocation #{invocation_id}): a worker admits it to "
        "its lane."
    )
    return command_response(
        message,
        fragment="catalog/_start.html",
        redirect_to=request.referrer or url_for("catalog.index"),
        **start_form(actor_type, name, actor_id=actor_id, arguments=raw),
    )


def parse_arguments(raw: str) -> list[Any]:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as error:
        refuse(
            f"The arguments are not valid JSON ({error.msg} at line {error.lineno}, column {error.colno}). "
            'Write a JSON array, like ["Paris", 3] or [] for none.'
        )
    except (ValueError, RecursionError):  # a number of thousands of digits, or nesting
        refuse("The arguments are too deeply nested, or hold a number too long: send a flatter JSON array.")
    if not isinstance(value, list):
        kind = JSON_KINDS.get(type(value), "something else")
        refuse(f'The arguments must be a JSON array, like ["Paris", 3] or [] for none, not {kind}.')
    return value


def refuse(description: str) -> NoReturn:
    abort(400, description=f"{description} {NOTHING_STARTED}")
