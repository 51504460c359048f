"""``/favicon.ico``: browsers ask for it wherever a page names no icon (the JSON API's pages,
``/api/openapi.json``): the studio's icon (``static/favicon.svg``), public and cached for a
day, not a 404 in every browser's console."""

from __future__ import annotations

from flask import Blueprint, current_app
from werkzeug.wrappers import Response

from ..security.auth import public

bp = Blueprint("favicon", __name__)

#: How long browsers and proxies may keep the icon.
MAX_AGE = 24 * 60 * 60


@bp.get("/favicon.ico")
@public
def icon() -> Response:
    assert current_app.static_folder is not None
    response = current_app.send_static_file("favicon.svg")
    response.mimetype = "image/svg+xml"
    response.cache_control.public = True
    response.cache_control.max_age = MAX_AGE
    return response
