"""The read-only JSON API for actions and trees, with its OpenAPI document. (Empty until it
is built.) A signed-in session reaches it like any page; a client asking for JSON that is
not signed in gets 401 JSON (app.auth)."""

from __future__ import annotations

from flask import Blueprint

bp = Blueprint("api", __name__, url_prefix="/api")
