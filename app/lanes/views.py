"""Lanes (the engine calls them performances): each concurrency key with its current action
and its pending queue, and why it is not moving, in words. Read-only pages that refresh
themselves while their lanes have a current action.

The list shows contention first: the longest queues first, lanes whose only action is the
current one hidden unless asked for; sorted and filtered by queue length, oldest wait and
key prefix, all in the URL (a bad value is a 400 that names its parameter).
"""

from __future__ import annotations

from datetime import timedelta

from flask import Blueprint, abort, request
from werkzeug.wrappers import Response

from engine.models import Action

from .. import queries
from ..database import db
from ..views import int_arg, links, render, wants_fragment
from . import queries as queries_lanes

bp = Blueprint("lanes", __name__, url_prefix="/lanes")


bp.context_processor(links)


#: The least waits the list filters by, as the form offers them.
WAITS = {
    "1m": timedelta(minutes=1),
    "10m": timedelta(minutes=10),
    "1h": timedelta(hours=1),
    "1d": timedelta(days=1),
}
SORT_LABELS = {
    queries_lanes.QUEUE: "Longest queue first",
    queries_lanes.WAIT: "Oldest wait first",
    queries_lanes.KEY: "Key",
}
#: The longest key prefix (a key is at most 255 characters).
MAX_KEY = 255


@bp.get("/")
def index() -> Response:
    """The lanes with a current action: by default those with a queue, longest first.
    ``q`` key prefix, ``sort`` queue|wait|key, ``min_queue`` N, ``waited`` 1m|10m|1h|1d,
    ``single`` 1 to show lanes with a single action too; ``after`` (key order) or ``page``."""
    view = {
        "q": text_arg("q"),
        "sort": choice_arg("sort", queries_lanes.SORTS, queries_lanes.QUEUE),
        "min_queue": int_arg("min_queue", high=1_000_000) or 0,
        "waited": choice_arg("waited", tuple(WAITS), ""),
        "single": flag_arg("single"),
    }
    after = text_arg("after") or None
    page_number = int_arg("page", high=100_000) or 0
    session = db.session()
    page = queries_lanes.lanes(
        session,
        prefix=view["q"],
        after=after,
        sort=view["sort"],
        single=view["single"],
        min_queue=view["min_queue"],
        waited=WAITS.get(view["waited"]),
        page=page_number,
    )
    # The capped count is read for the whole page only, never by the polling fragment.
    total = None if wants_fragment() else queries.lane_count(session)
    # The URL parameters of this view, without their defaults (for links and polling).
    params = {
        k: (1 if v is True else v)
        for k, v in view.items()
        if v and not (k == "sort" and v == queries_lanes.QUEUE)
    }
    return render(
        "lanes/index.html",
        "lanes/_list.html",
        page=page,
        params=params,
        view=view,
        after=after,
        page_number=page_number,
        total=total,
        sorts=SORT_LABELS,
        waits=WAITS,
        q=view["q"],
    )


def text_arg(name: str) -> str:
    value = request.args.get(name, "").strip()
    if len(value) > MAX_KEY:
        abort(400, description=f"{name} is longer than any lane key ({MAX_KEY} characters).")
    return value


def choice_arg(name: str, choices: tuple[str, ...], default: str) -> str:
    value = request.args.get(name, "").strip()
    if not value:
        return default
    if value not in choices:
        abort(400, description=f"{name}={value[:40]!r} is not one of {', '.join(choices)}.")
    return value


def flag_arg(name: str) -> bool:
    value = request.args.get(name, "").strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    abort(400, description=f"{name}={value[:40]!r} is not a yes or no: use 1 or leave it out.")


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
