"""Achievements: the checksum of the last success under each key, searched by key (prefix
or contains); the action that granted each and the invocations it skipped since; and the
"forget" command, after which the next invocation under the key runs.
"""

from __future__ import annotations

from flask import Blueprint, abort, request, url_for
from werkzeug.wrappers import Response

from engine import commands, history

from .. import queries
from ..database import db
from ..security import users
from ..security.auth import current_user, requires
from ..views import command_response, int_arg, links, render, wants_fragment
from . import queries as queries_achievements

bp = Blueprint("achievements", __name__, url_prefix="/achievements")
bp.context_processor(links)

MODES = (queries_achievements.PREFIX, queries_achievements.CONTAINS)


@bp.get("/")
def index() -> Response:
    """Achievements in key order; ``q`` searches the keys (``mode``: prefix or contains)."""
    q = request.args.get("q", "").strip()
    mode = request.args.get("mode", queries_achievements.PREFIX)
    if mode not in MODES:
        mode = queries_achievements.PREFIX
    after = request.args.get("after") or None
    session = db.session()
    page = queries_achievements.search(session, q=q, mode=mode, after=after)
    total = None if wants_fragment() else queries.achievement_count(session)
    return render(
        "achievements/index.html",
        "achievements/_list.html",
        page=page,
        q=q,
        mode=mode,
        after=after,
        total=total,
    )


@bp.get("/key")
def show() -> Response:
    """One achievement by its key, with a page of the invocations it skipped."""
    key = request.args.get("key", "")
    before = int_arg("before")
    session = db.session()
    row = queries_achievements.find(session, key) if key else None
    skipped, next_before = (
        queries_achievements.skips(session, row.achievement, before=before) if row is not None else ([], None)
    )
    return render(
        "achievements/show.html", key=key, row=row, skipped=skipped, before=before, next_before=next_before
    )


#: The longest checksum key the form takes (a stored key is at most 255 characters; the
#: audit keeps a longer target whole in its data: engine.audit).
MAX_KEY = 500


@bp.post("/forget")
@requires(users.OPERATOR)
def forget() -> Response:
    """Forget the achievement under ``checksum_key``: the next invocation under it runs."""
    key = request.form.get("checksum_key", "")
    if not key:
        abort(400, description="Say which achievement to forget: the form has no checksum_key.")
    if len(key) > MAX_KEY:
        abort(
            400,
            description=f"checksum_key is longer than any key ({MAX_KEY} characters): nothing was forgotten.",
        )
    reason = request.form.get("reason", "").strip() or None
    user = current_user()
    result = commands.forget(key, by=user.name if user else None, reason=reason, cause=history.OPERATOR)
    if result:
        message = f"Forgot the achievement under {key}: the next invocation under this key runs."
    else:
        message = f"No achievement under {key}: it was already forgotten, or replaced by newer work."
    return command_response(
        message,
        ok=bool(result),
        fragment="achievements/_forgotten.html",
        redirect_to=request.form.get("next") or url_for("achievements.index"),
        key=key,
        row_id=request.form.get("row_id", ""),
        said=message,
    )
