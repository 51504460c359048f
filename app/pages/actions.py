"""Actions list: filters in the URL, search in the arguments, keyset pagination; the
action page with its live tree, failure path, timeline, history and errors; commands.

(A placeholder: its views replace ``index`` below; the nav links to ``actions.index``.)
"""

from __future__ import annotations

from flask import Blueprint
from werkzeug.wrappers import Response

from ..views import render

bp = Blueprint("actions", __name__, url_prefix="/actions")


@bp.get("/")
def index() -> Response:
    return render("placeholder.html", title="Actions")
