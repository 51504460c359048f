"""Catalog: every registered definition drawn as a diagram of its steps and options, and
a form to start an action on an actor.

(A placeholder: its views replace ``index`` below; the nav links to ``catalog.index``.)
"""

from __future__ import annotations

from flask import Blueprint
from werkzeug.wrappers import Response

from ..views import render

bp = Blueprint("catalog", __name__, url_prefix="/catalog")


@bp.get("/")
def index() -> Response:
    return render("placeholder.html", title="Catalog")
