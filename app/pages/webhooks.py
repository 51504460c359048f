"""Webhooks: the completion endpoint for outbound actions.

``POST /webhooks/complete`` completes an outbound action from outside (the DNS provider,
the payment gateway): the engine's ``commands.complete`` with ``cause=webhook`` and
``by="webhook"``, so the completion lands in the action's history and in the audit.

- **Authenticated** by ``X-Stepwise-Signature: sha256=<hex>``, the HMAC-SHA256 of
  ``"{X-Stepwise-Timestamp}.{raw body}"`` keyed with ``STEPWISE_WEBHOOK_SECRET``, compared
  in constant time. ``X-Stepwise-Timestamp`` is the time of sending in unix seconds; one
  more than ``TOLERANCE`` seconds away from the server's clock is refused as a replay.
- **Idempotent** by the completion's ``id`` (``app.webhook_deliveries``): a delivery of an
  id already answered gets the first answer again (``X-Stepwise-Replayed: true``) and
  completes nothing.
- **Addressed** by ``action_id``, or by ``actor_type``, ``actor_id`` and ``name``: the
  outbound action current in that lane (as ``engine.complete(actor, name)`` chooses it).
- **Bad input gets a 4xx JSON answer** ``{"error": <code>, "message": <what is wrong>}``,
  never a 5xx: 400 malformed JSON, 401 signature or timestamp, 404 unknown action, 409 not
  outbound (or not current in its lane, or the same id still being handled), 413 too large,
  422 missing or invalid fields (``fields`` names each). An action completed before is not
  an error: 200 ``{"completed": false, "reason": "already_completed"}``.

The view is ``@public`` (no session) and ``@csrf.exempt``: the signature is its
authentication. Without ``STEPWISE_WEBHOOK_SECRET`` it answers 503 ``webhook_disabled``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import math
import re
from dataclasses import dataclass
from datetime import UTC
from typing import Any, NoReturn

from flask import Blueprint, current_app, jsonify, request
from werkzeug.wrappers import Response

from engine import clock, commands, history, status
from engine.models import Action

from .. import csrf, queries_api
from .. import webhook_deliveries as deliveries
from ..auth import public
from ..database import db

log = logging.getLogger("stepwise.studio.webhooks")

bp = Blueprint("webhooks", __name__, url_prefix="/webhooks")

TIMESTAMP_HEADER = "X-Stepwise-Timestamp"
SIGNATURE_HEADER = "X-Stepwise-Signature"
REPLAYED_HEADER = "X-Stepwise-Replayed"
#: How far (seconds) a request's timestamp may be from the server's clock, either way.
TOLERANCE = 300
#: The largest body accepted (bytes).
MAX_BODY = 1 << 20
MAX_NOTE = 10_000
#: How deep a payload's objects and arrays may nest.
MAX_DEPTH = 32
MAX_NAME = 255
MAX_ID = queries_api.MAX_ID
#: Who the audit and the history say completed the action.
BY = "webhook"

FIELDS = ("id", "action_id", "actor_type", "actor_id", "name", "status", "note", "payload")
LANE_FIELDS = ("actor_type", "actor_id", "name")
TIMESTAMP = re.compile(r"[0-9]{1,12}")
SIGNATURE = re.compile(r"sha256=[0-9a-fA-F]{64}")


def sign(secret: str, timestamp: int | str, body: bytes) -> str:
    """The ``X-Stepwise-Signature`` of a request: ``sha256=`` and the hex HMAC-SHA256 of
    ``"{timestamp}.{body}"`` keyed with the shared secret."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


# --- answers ---------------------------------------------------------------------------------


def reply(code: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> Response:
    response = jsonify(body)
    response.status_code = code
    response.headers["Cache-Control"] = "no-store"
    for name, value in (headers or {}).items():
        response.headers[name] = value
    return response


class Refusal(Exception):
    """A delivery refused with a 4xx (or 503) JSON answer that says what is wrong."""

    def __init__(
        self, code: int, error: str, message: str, headers: dict[str, str] | None = None, **extra: Any
    ) -> None:
        super().__init__(message)
        self.code, self.error, self.message = code, error, message
        self.headers = headers or {}
        self.extra = extra

    def response(self) -> Response:
        return reply(self.code, {"error": self.error, "message": self.message, **self.extra}, self.headers)


def refuse(code: int, error: str, message: str, **extra: Any) -> NoReturn:
    raise Refusal(code, error, message, **extra)


def unauthorized(error: str, message: str) -> NoReturn:
    raise Refusal(
        401, error, message, headers={"WWW-Authenticate": 'Stepwise-HMAC-SHA256 realm="stepwise-webhooks"'}
    )


# --- the endpoint ----------------------------------------------------------------------------


@bp.post("/complete")
@public
@csrf.exempt
def complete() -> Response:
    """Complete an outbound action: see the module's docstring and the README."""
    try:
        return deliver()
    except Refusal as refusal:
        log.info("webhook delivery refused: %s %s: %s", refusal.code, refusal.error, refusal.message)
        return refusal.response()


def deliver() -> Response:
    raw = read_body()
    authenticate(raw)
    body = parse(raw)
    completion = validate(body)
    fingerprint = deliveries.fingerprint(body)
    deliveries.ensure_table()
    claim = deliveries.claim(completion.id, fingerprint)
    if not claim.owned:
        return answered_before(completion, fingerprint, claim.existing)
    try:
        code, answer, action_id = perform(completion, claim.action_id)
    except Refusal:
        release(completion.id)  # nothing was completed: the id may be sent again
        raise
    # (On any other error the claim stays: a delivery after CLAIM_TIMEOUT takes it over.)
    deliveries.answer(completion.id, code, answer, action_id)
    return reply(code, answer)


def answered_before(
    completion: Completion, fingerprint: str, existing: deliveries.WebhookDelivery | None
) -> Response:
    assert existing is not None
    if existing.fingerprint != fingerprint:
        refuse(
            422,
            "id_reused",
            f"the completion id {completion.id!r} was used before for another completion (another "
            "action, status, note or payload): give each completion its own id, and send a "
            "completion again with the very same body",
        )
    if existing.answered_at is None or existing.status_code is None or existing.response is None:
        raise Refusal(
            409,
            "in_progress",
            f"a delivery of completion {completion.id!r} is being handled now: try again in a few seconds",
            headers={"Retry-After": "5"},
        )
    return reply(existing.status_code, existing.response, {REPLAYED_HEADER: "true"})


def release(completion_id: str) -> None:
    try:
        deliveries.release(completion_id)
    except Exception:  # the original error matters more; a stale claim is taken over later
        log.exception("could not release the claim on webhook delivery %r", completion_id)


# --- reading and authenticating ----------------------------------------------------------------


def read_body() -> bytes:
    too_large = f"the body is larger than {MAX_BODY:,} bytes: send the completion's fields only"
    if request.content_length is not None and request.content_length > MAX_BODY:
        refuse(413, "too_large", too_large)
    raw = request.stream.read(MAX_BODY + 1)
    if len(raw) > MAX_BODY:
        refuse(413, "too_large", too_large)
    return raw


def authenticate(raw: bytes) -> None:
    """Check the signature, then the timestamp's age (so only a sender who knows the secret
    is told that its clock or its retry is off)."""
    secret = current_app.config.get("STEPWISE_WEBHOOK_SECRET")
    if not secret:
        refuse(
            503,
            "webhook_disabled",
            "the completion webhook is off: STEPWISE_WEBHOOK_SECRET is not set on the server",
        )
    timestamp = request.headers.get(TIMESTAMP_HEADER, "").strip()
    signature = request.headers.get(SIGNATURE_HEADER, "").strip()
    if not timestamp:
        unauthorized(
            "missing_timestamp", f"the {TIMESTAMP_HEADER} header is missing: send the time in unix seconds"
        )
    if not TIMESTAMP.fullmatch(timestamp):
        unauthorized(
            "bad_timestamp",
            f"the {TIMESTAMP_HEADER} header must be the time of sending in whole unix seconds "
            "(e.g. 1718000000)",
        )
    if not signature:
        unauthorized(
            "missing_signature",
            f"the {SIGNATURE_HEADER} header is missing: send sha256=<hex HMAC-SHA256 of "
            '"{timestamp}.{body}" with the shared secret>',
        )
    if not SIGNATURE.fullmatch(signature):
        unauthorized(
            "bad_signature",
            f"the {SIGNATURE_HEADER} header must be sha256= followed by 64 hexadecimal digits",
        )
    expected = sign(secret, timestamp, raw)
    if not hmac.compare_digest(expected.encode(), signature.lower().encode()):
        unauthorized(
            "bad_signature",
            f'the {SIGNATURE_HEADER} does not match: sign "{{timestamp}}.{{raw body}}" (the '
            f"{TIMESTAMP_HEADER} value, a dot, the body's exact bytes) with HMAC-SHA256 and the "
            "shared secret",
        )
    age = round(clock.now().replace(tzinfo=UTC).timestamp()) - int(timestamp)
    if abs(age) > TOLERANCE:
        when = f"{age} seconds old" if age > 0 else f"{-age} seconds in the future"
        unauthorized(
            "stale_timestamp",
            f"stale timestamp: the {TIMESTAMP_HEADER} is {when}, more than {TOLERANCE} seconds from "
            "the server's clock, so the request is refused as a replay. Sign each delivery (and "
            "each retry) with the current time, and keep the sender's clock in sync",
        )


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is too large")
    return value


def parse(raw: bytes) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        refuse(400, "malformed_json", "the body is not UTF-8 text: send a JSON object")
    if not text.strip():
        refuse(400, "malformed_json", "the body is empty: send a JSON object")
    try:
        return json.loads(text, parse_constant=_no_constants, parse_float=_finite)
    except RecursionError:
        refuse(400, "malformed_json", "the body is not valid JSON: it nests too deeply")
    except ValueError as error:
        refuse(400, "malformed_json", f"the body is not valid JSON: {error}")


# --- the completion's fields -------------------------------------------------------------------


@dataclass(frozen=True)
class Completion:
    id: str
    to: str
    note: str | None
    payload: dict[str, Any] | None
    action_id: int | None
    lane: tuple[str, str, str] | None


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def text_problem(value: str) -> str | None:
    if "\x00" in value:
        return "must not contain NUL characters"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "must be valid Unicode (it holds an unpaired surrogate)"
    return None


def json_problem(value: Any, depth: int = 1) -> str | None:
    if isinstance(value, str):
        return text_problem(value)
    if isinstance(value, dict | list):
        if depth > MAX_DEPTH:
            return f"must not nest more than {MAX_DEPTH} levels deep"
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            problem = (text_problem(key) if isinstance(key, str) else None) or json_problem(item, depth + 1)
            if problem is not None:
                return problem
    return None


def name_problem(value: Any, what: str) -> str | None:
    if not isinstance(value, str):
        return f"must be {what}, not {json_type(value)}"
    if not value.strip():
        return "must not be empty"
    if len(value) > MAX_NAME:
        return f"must be at most {MAX_NAME} characters"
    return text_problem(value)


def validate(body: Any) -> Completion:
    """The completion the body describes, or 422 naming every field that is wrong."""
    if not isinstance(body, dict):
        refuse(
            422,
            "invalid_fields",
            f"the body must be a JSON object with id, status and action_id (or actor_type, actor_id "
            f"and name), not {json_type(body)}",
            fields={},
        )
    problems: dict[str, str] = {}
    for key in sorted(set(body) - set(FIELDS)):
        problems[key[:80]] = f"is not a field: the fields are {', '.join(FIELDS)}"

    completion_id = body.get("id")
    if completion_id is None:
        problems["id"] = "is required: a unique id of this completion, the same in every retry"
    elif (problem := name_problem(completion_id, "a string")) is not None:
        problems["id"] = problem

    to = body.get("status")
    if to is None:
        problems["status"] = f"is required: one of {', '.join(sorted(status.COMPLETIONS))}"
    elif not isinstance(to, str) or to not in status.COMPLETIONS:
        shown = repr(to[:40]) if isinstance(to, str) else json_type(to)
        problems["status"] = f"must be one of {', '.join(sorted(status.COMPLETIONS))}, not {shown}"

    note = body.get("note")
    if note is not None:
        if not isinstance(note, str):
            problems["note"] = f"must be a string, not {json_type(note)}"
        elif len(note) > MAX_NOTE:
            problems["note"] = f"must be at most {MAX_NOTE:,} characters"
        elif (problem := text_problem(note)) is not None:
            problems["note"] = problem

    payload = body.get("payload")
    if payload is not None:
        if not isinstance(payload, dict):
            problems["payload"] = f"must be an object, not {json_type(payload)}"
        elif (problem := json_problem(payload)) is not None:
            problems["payload"] = problem

    action_id = body.get("action_id")
    by_lane = [k for k in LANE_FIELDS if body.get(k) is not None]
    lane: tuple[str, str, str] | None = None
    if action_id is not None:
        if isinstance(action_id, bool) or not isinstance(action_id, int):
            problems["action_id"] = f"must be an integer, not {json_type(action_id)}"
        elif not 1 <= action_id <= MAX_ID:
            problems["action_id"] = f"must be an action's id, between 1 and {MAX_ID}"
        if by_lane:
            problems["action_id"] = (
                "give either action_id or actor_type, actor_id and name (the lane's current "
                "outbound action), not both"
            )
    elif not by_lane:
        problems["action_id"] = (
            "is required, unless actor_type, actor_id and name address the outbound action "
            "current in that lane"
        )
    else:
        actor_id = body.get("actor_id")
        if isinstance(actor_id, int) and not isinstance(actor_id, bool):
            actor_id = str(actor_id)
        values: dict[str, Any] = {
            "actor_type": body.get("actor_type"),
            "actor_id": actor_id,
            "name": body.get("name"),
        }
        for key, value in values.items():
            if value is None:
                problems[key] = "is required with " + " and ".join(k for k in LANE_FIELDS if k != key)
            elif problem := name_problem(
                value, "a string" if key != "actor_id" else "a string or an integer"
            ):
                problems[key] = problem
        if not any(k in problems for k in LANE_FIELDS):
            lane = (values["actor_type"], values["actor_id"], values["name"])

    if problems:
        listed = "; ".join(f"{k} {v}" for k, v in problems.items())
        missing = any(v.startswith("is required") for v in problems.values())
        refuse(422, "missing_fields" if missing else "invalid_fields", listed, fields=problems)
    return Completion(
        id=str(completion_id),
        to=str(to),
        note=note,
        payload=payload,
        action_id=action_id,
        lane=lane,
    )


# --- completing ------------------------------------------------------------------------------


def describe(action: Action) -> str:
    return f"action {action.id} ({action.name} on {action.actor_type}/{action.actor_id})"


def target_of(completion: Completion) -> int:
    """The id of the action to complete, or a 404/409 refusal."""
    session = db.session()
    if completion.action_id is not None:
        action = session.get(Action, completion.action_id, populate_existing=True)
        if action is None:
            refuse(404, "unknown_action", f"there is no action {completion.action_id}")
        if not action.outbound:
            refuse(
                409,
                "not_outbound",
                f"{describe(action)} is not outbound: only outbound actions are completed from outside",
            )
        return action.id
    assert completion.lane is not None
    actor_type, actor_id, name = completion.lane
    current = queries_api.current_outbound(session, actor_type, actor_id, name)
    if current is not None:
        return current
    latest = queries_api.latest_action(session, actor_type, actor_id, name)
    if latest is None:
        refuse(404, "unknown_action", f"there is no action {name!r} on {actor_type}/{actor_id}")
    if not latest.outbound:
        refuse(
            409,
            "not_outbound",
            f"{describe(latest)} is not outbound: only outbound actions are completed from outside",
        )
    if latest.status in status.TERMINAL:
        return latest.id  # the engine says it is already completed, and audits the attempt
    refuse(
        409,
        "not_current",
        f"{describe(latest)} is {latest.status}, queued in its lane behind another action: by actor "
        "and name only the lane's current outbound action is completed; give its action_id instead",
        action_id=latest.id,
    )


def perform(completion: Completion, chosen: int | None) -> tuple[int, dict[str, Any], int | None]:
    """Complete the action through the engine: (status code, answer, action id). ``chosen``
    is the action an abandoned delivery of this id had chosen: complete that one."""
    if chosen is not None:
        target = chosen
    else:
        try:
            target = target_of(completion)
        finally:
            db.session.rollback()  # no transaction left open while the engine works
        deliveries.aim(completion.id, target)
    result = commands.complete(
        target,
        completion.to,
        by=BY,
        note=completion.note,
        payload=completion.payload,
        cause=history.WEBHOOK,
    )
    if result.reason == "not_found":
        refuse(404, "unknown_action", f"there is no action {target}")
    if result.reason == "not_outbound":
        refuse(409, "not_outbound", f"action {target} is not outbound")
    action = db.session.get(Action, target, populate_existing=True)
    db.session.rollback()
    answer = {
        "id": completion.id,
        "completed": bool(result),
        "reason": result.reason,
        "action_id": target,
        "requested_status": completion.to,
        "action_status": action.status if action is not None else None,
    }
    return 200, answer, target
