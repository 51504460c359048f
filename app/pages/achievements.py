"""Achievements: list and search by key, the invocations each one skipped, and the
"forget" command.

(A placeholder: its views replace ``index`` below; the nav links to ``achievements.index``.)
"""

from __future__ import annotations

from flask import Blueprint
from werkzeug.wrappers import Response

from ..views import render

bp = Blueprint("achievements", __name__, url_prefix="/achievements")


@bp.get("/")
def index() -> Response:
    return render("placeholder.html", title="Achievements")
