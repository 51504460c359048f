"""Sending a signal from the action page: ``POST /actions/<id>/signal`` with a name, an
optional JSON payload and a note; operators only, CSRF-checked, audited by
``engine.commands.signal``, answered like the page's other commands."""

from __future__ import annotations

from flask import Blueprint, abort, request
from werkzeug.wrappers import Response

from engine import commands, history
from engine.signal import NAME_LENGTH

from .. import schemas
from ..security import users
from ..security.auth import requires
from .views import answer, in_range, operator

bp = Blueprint("signals", __name__)

#: The longest JSON payload the form sends.
MAX_PAYLOAD = 20_000


@bp.post("/actions/<int:action_id>/signal")
@requires(users.OPERATOR)
def send(action_id: int) -> Response:
    in_range(action_id)
    name = (request.form.get("name") or "").strip()
    if not name or len(name) > NAME_LENGTH:
        abort(
            400,
            description=f"The signal's name is required, at most {NAME_LENGTH} characters: nothing was sent.",
        )
    payload = schemas.form_json(request.form.get("payload"), MAX_PAYLOAD, "nothing was sent")
    note = (request.form.get("note") or "").strip() or None
    result = commands.signal(action_id, name, payload, by=operator(), note=note, cause=history.OPERATOR)
    if result.reason == "finished":
        return answer(action_id, result, "")
    kept = "no step waits for it yet: it stays in the inbox until one does"
    done = f"Signal “{name}” sent to action {action_id}: " + (
        "the waiting step took it." if result.reason == "consumed" else kept + "."
    )
    return answer(action_id, result, done)
