"""Audit: every operator command and webhook completion: who, when, what, why.

(A placeholder: its views replace ``index`` below; the nav links to ``audit.index``.)
"""

from __future__ import annotations

from flask import Blueprint
from werkzeug.wrappers import Response

from ..views import render

bp = Blueprint("audit", __name__, url_prefix="/audit")


@bp.get("/")
def index() -> Response:
    return render("placeholder.html", title="Audit")
