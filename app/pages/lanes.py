"""Lanes (performances): each concurrency key with its performing action and pending
queue, and why it is not moving, in words.

(A placeholder: its views replace ``index`` below; the nav links to ``lanes.index``.)
"""

from __future__ import annotations

from flask import Blueprint
from werkzeug.wrappers import Response

from ..views import render

bp = Blueprint("lanes", __name__, url_prefix="/lanes")


@bp.get("/")
def index() -> Response:
    return render("placeholder.html", title="Lanes (performances)")
