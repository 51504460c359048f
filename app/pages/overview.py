"""Overview: counts by status, at a glance. (A placeholder: the full overview, with charts,
the oldest pending action per lane and stuck actions, grows here.)"""

from __future__ import annotations

from flask import Blueprint
from werkzeug.wrappers import Response

from .. import queries
from ..database import db
from ..views import render

bp = Blueprint("overview", __name__)


@bp.get("/")
def index() -> Response:
    return render("overview/index.html", "overview/_counts.html", **counts())


@bp.get("/overview/counts")
def counts_fragment() -> Response:
    """The counts alone: the fragment polls this while the tab is visible."""
    return render("overview/_counts.html", **counts())


def counts() -> dict[str, object]:
    session = db.session
    return {
        "counts": queries.status_counts(session),
        "lanes": queries.lane_count(session),
        "achievements": queries.achievement_count(session),
    }
