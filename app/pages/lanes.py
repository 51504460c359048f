"""Lanes ("queues (performances)"): each concurrency key with its current action and its
pending queue, and why it is not moving, in words. Read-only pages that refresh themselves
while their lanes have a current action.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, request, url_for
from werkzeug.routing import BuildError
from werkzeug.wrappers import Response

from engine.models import Action

from .. import queries, queries_lanes
from ..database import db
from ..views import int_arg, render, wants_fragment

bp = Blueprint("lanes", __name__, url_prefix="/lanes")


def action_url(action_id: int) -> str:
    """The action page of ``action_id``."""
    try:
        return url_for("action.show", action_id=action_id)
    except BuildError:  # the action page's area is not registered (a trimmed app)
        return f"{url_for('actions.index')}{action_id}"


def links() -> dict[str, Any]:
    """Template helpers shared by the lanes, achievements, catalog and audit pages."""
    return {"action_url": action_url}


bp.context_processor(links)


@bp.get("/")
def index() -> Response:
    """Every lane with a current action, in key order; ``q`` filters by key prefix."""
    prefix = request.args.get("q", "").strip()
    after = request.args.get("after") or None
    session = db.session()
    page = queries_lanes.lanes(session, prefix=prefix, after=after)
    # The capped count is read for the whole page only, never by the polling fragment.
    total = None if wants_fragment() else queries.lane_count(session)
    return render("lanes/index.html", "lanes/_list.html", page=page, q=prefix, after=after, total=total)


@bp.get("/lane")
def show() -> Response:
    """One lane by its key: current action, why it is not moving, the whole queue (keyset
    paginated) and the latest actions of the key."""
    key = request.args.get("key", "")
    after = int_arg("after")
    session = db.session()
    lane = queries_lanes.lane(session, key) if key else None
    pending: list[Action] = []
    next_after = None
    if lane is not None and lane.current is not None:
        pending, next_after = queries_lanes.queue(session, lane.id, lane.current.id, after=after)
    return render(
        "lanes/show.html",
        "lanes/_lane.html",
        key=key,
        lane=lane,
        pending=pending,
        after=after,
        next_after=next_after,
        recent=queries_lanes.recent(session, key) if key else [],
    )
