"""Audit: every operator command and webhook completion, newest first: who, when, what, why,
its result, and a bulk command's progress (its row refreshes itself until it is finished).
Filtered by command, by user and by a time-range preset (``window=24h``); the filter lives
in the URL.
"""

from __future__ import annotations

from flask import Blueprint, abort, request
from werkzeug.wrappers import Response

from .. import time_ranges
from ..database import db
from ..views import int_arg, links, render
from . import queries as queries_audit

bp = Blueprint("audit", __name__, url_prefix="/audit")
bp.context_processor(links)


@bp.get("/")
def index() -> Response:
    command = request.args.get("command", "").strip() or None
    by = request.args.get("by", "").strip() or None
    before = int_arg("before")
    preset, problem = time_ranges.parse((request.args.get(time_ranges.FIELD) or "").strip(), custom=False)
    if problem:
        abort(400, description=f"{time_ranges.FIELD}: {problem}")
    since = preset.since() if preset is not None else None
    page = queries_audit.entries(db.session(), command=command, by=by, before=before, since=since)
    return render(
        "audit/index.html",
        "audit/_list.html",
        page=page,
        command=command,
        by=by,
        before=before,
        window=preset.key if preset is not None else None,
        preset=preset,
        since=since,
        presets=[(p.key, p.label) for p in time_ranges.PRESETS.values()],
        commands=queries_audit.COMMANDS,
    )


@bp.get("/<int:entry_id>")
def row(entry_id: int) -> Response:
    """One entry's row: a bulk command's row polls this until the command is finished."""
    entry = queries_audit.entry(db.session(), entry_id)
    if entry is None:
        abort(404, description=f"There is no audit entry {entry_id}.")
    return render("audit/_row.html", entry=entry)
