"""Webhooks: the completion endpoint for outbound actions.

``POST /webhooks/complete`` completes an outbound action from outside (the DNS provider,
the payment gateway): the engine's ``commands.complete`` with ``cause=webhook`` and
``by="webhook"``, so the completion lands in the action's history and in the audit.

- **Authenticated** by ``X-Stepwise-Signature: sha256=<hex>``, the HMAC-SHA256 of
  ``"{X-Stepwise-Timestamp}.{raw body}"`` keyed with ``STEPWISE_WEBHOOK_SECRET``, compared
  in constant time. ``X-Stepwise-Timestamp`` is the time of sending in unix seconds; one
  more than ``TOLERANCE`` seconds away from the server's clock is refused as a replay.
- **Idempotent** by the completion's ``id`` (``app.webhooks.deliveries``): a delivery of an
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
import logging
import re
from datetime import UTC
from typing import Any, NoReturn

from flask import Blueprint, current_app, request
from sqlalchemy import select
from werkzeug.wrappers import Response

import engine
from engine import clock, commands, history, status
from engine.errors import SignalRefused
from engine.models import Action, Signal

from ..database import db
from ..security import csrf
from ..security import hardening as security
from ..security.auth import public
from . import deliveries as deliveries
from . import queries, signal_body
from .body import Completion, CompletionResult, Refusal, parse, refuse, reply, validate

log = logging.getLogger("stepwise.studio.webhooks")

bp = Blueprint("webhooks", __name__, url_prefix="/webhooks")
security.webhook_limits(bp)

TIMESTAMP_HEADER = "X-Stepwise-Timestamp"
SIGNATURE_HEADER = "X-Stepwise-Signature"
REPLAYED_HEADER = "X-Stepwise-Replayed"
#: How far (seconds) a request's timestamp may be from the server's clock, either way.
TOLERANCE = 300
#: The largest body accepted (bytes).
MAX_BODY = 1 << 20
#: Who the audit says completed it.
BY = "webhook"
TIMESTAMP = re.compile(r"[0-9]{1,12}")
SIGNATURE = re.compile(r"sha256=[0-9a-fA-F]{64}")


def sign(secret: str, timestamp: int | str, body: bytes) -> str:
    """The ``X-Stepwise-Signature`` of a request: ``sha256=`` and the hex HMAC-SHA256 of
    ``"{timestamp}.{body}"`` keyed with the shared secret."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


# --- answers ---------------------------------------------------------------------------------


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


@bp.post("/signal")
@public
@csrf.exempt
def signal() -> Response:
    """Send a signal to an action (``engine.signal``): signed and refused like a completion;
    the delivery's ``id`` is the signal's key, so a retried delivery is one signal, consumed
    once."""
    try:
        raw = read_body()
        authenticate(raw)
        delivery = signal_body.validate(parse(raw))
        return send_signal(delivery)
    except Refusal as refusal:
        log.info("signal delivery refused: %s %s: %s", refusal.code, refusal.error, refusal.message)
        return refusal.response()


def send_signal(delivery: signal_body.SignalDelivery) -> Response:
    target: int | tuple[str, str, str] = (
        delivery.action_id if delivery.action_id is not None else delivery.lane
    )  # type: ignore[assignment]
    before = _delivered(delivery.id, target)
    if before is not None and before[:2] != (delivery.name, delivery.payload):
        refuse(
            422,
            "id_reused",
            f"the delivery id {delivery.id!r} was used before for another signal ({before[0]!r} to "
            f"action {before[2]}): give each signal its own id, and send a retry with the very same "
            "body",
        )
    try:
        sent = engine.signal(
            target,
            delivery.name,
            delivery.payload,
            by=BY,
            note=delivery.note,
            key=delivery.id,
            run_here=False,
        )
    except SignalRefused as refused:
        code, error = (404, "unknown_action") if refused.reason == "not_found" else (409, "action_finished")
        refuse(code, error, str(refused))
    answer = signal_body.SignalResult(
        id=delivery.id,
        signal_id=sent.id,
        signal=sent.name,
        action_id=sent.action_id,
        consumed=sent.consumed_at is not None,
        replayed=before is not None,
    )
    return reply(
        200, answer.model_dump(mode="json"), {REPLAYED_HEADER: "true"} if before is not None else None
    )


def _delivered(key: str, target: int | tuple[str, str, str]) -> tuple[str, Any, int] | None:
    """The name, payload and action of the signal an earlier delivery of this id recorded."""
    session = db.session()
    try:
        query = select(Signal.name, Signal.payload, Signal.action_id).where(Signal.delivery_key == key)
        if isinstance(target, int):
            query = query.where(Signal.action_id == target)
        else:
            actor_type, actor_id, name = target
            query = query.join(Action, Action.id == Signal.action_id).where(
                Action.actor_type == actor_type, Action.actor_id == actor_id, Action.name == name
            )
        row = session.execute(query.order_by(Signal.id).limit(1)).first()
        return (row[0], row[1], row[2]) if row is not None else None
    finally:
        session.rollback()


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


# --- completing ------------------------------------------------------------------------------


def describe(action: Action) -> str:
    return f"action {action.id} ({action.name} on {action.actor_type}/{action.actor_id})"


def refuse_unless_outbound(action: Action) -> None:
    if not action.outbound:
        refuse(
            409,
            "not_outbound",
            f"{describe(action)} is not outbound: only outbound actions are completed from outside",
        )


def target_of(completion: Completion) -> int:
    """The id of the action to complete, or a 404/409 refusal."""
    session = db.session()
    if completion.action_id is not None:
        action = session.get(Action, completion.action_id, populate_existing=True)
        if action is None:
            refuse(404, "unknown_action", f"there is no action {completion.action_id}")
        refuse_unless_outbound(action)
        return action.id
    assert completion.lane is not None
    actor_type, actor_id, name = completion.lane
    current = queries.current_outbound(session, actor_type, actor_id, name)
    if current is not None:
        return current
    latest = queries.latest_action(session, actor_type, actor_id, name)
    if latest is None:
        refuse(404, "unknown_action", f"there is no action {name!r} on {actor_type}/{actor_id}")
    refuse_unless_outbound(latest)
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
    answer = CompletionResult(
        id=completion.id,
        completed=bool(result),
        reason=result.reason,
        action_id=target,
        requested_status=completion.to,
        action_status=action.status if action is not None else None,
    )
    return 200, answer.model_dump(mode="json"), target
