"""Deliveries of the completion webhook, by completion id: what makes it idempotent.

A delivery is *claimed* (its row inserted and committed) before the engine is asked to
complete anything, so two deliveries of one id never both complete: the second finds the
claim, and answers with the first delivery's stored answer once there is one (or 409
``in_progress`` while the first is still being handled). The claim records the action it
chose before the engine is called (``aim``); a claim whose process died is taken over after
``CLAIM_TIMEOUT`` by a delivery with the same body, which completes that same action (so a
lane-addressed completion never moves on to the lane's next action).

Only answers that reached the engine are kept (completed, or already completed). A delivery
refused before that (unknown action, not outbound, nothing waiting in the lane) releases its
claim, so the sender may try the same id again once the action is there.

The table is one of the studio's, made by the migrations (``stepwise db upgrade``,
``stepwise serve``), never from a request.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import JSON, BigInteger, String, delete, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Mapped, mapped_column

from engine import clock

from ..database import db

#: A claim older than this, never answered, belonged to a process that died: take it over.
CLAIM_TIMEOUT = timedelta(seconds=60)

#: The longest completion id (the column's width).
MAX_ID_LENGTH = 255


class WebhookDelivery(db.Model):
    __tablename__ = "studio_webhook_deliveries"

    #: The completion's id, chosen by the sender: one completion, however often delivered.
    id: Mapped[str] = mapped_column(String(MAX_ID_LENGTH), primary_key=True)
    #: sha256 of the body's JSON, canonical: the same id with another body is refused.
    fingerprint: Mapped[str] = mapped_column(String(64))
    received_at: Mapped[datetime] = mapped_column(default=clock.now)
    #: When the delivery being handled claimed the id (moved on when a claim is taken over).
    claimed_at: Mapped[datetime] = mapped_column(default=clock.now)
    action_id: Mapped[int | None] = mapped_column(BigInteger)
    #: The stored answer, sent again to every later delivery of the id.
    status_code: Mapped[int | None]
    response: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    answered_at: Mapped[datetime | None]

    def __repr__(self) -> str:
        return f"<WebhookDelivery {self.id!r} action={self.action_id} {self.status_code}>"


def fingerprint(body: Any) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class Claim:
    """The outcome of claiming an id: ``owned`` (handle the delivery), or the delivery that
    holds it (``existing``: answered, still being handled, or with another body).
    ``action_id`` is the action an abandoned claim had chosen: its successor completes that
    one, never the next action of a lane."""

    owned: bool
    existing: WebhookDelivery | None = None
    action_id: int | None = None


def claim(completion_id: str, body_fingerprint: str) -> Claim:
    """Claim ``completion_id`` for this delivery, in a transaction of its own."""
    session = db.session
    for _ in range(3):
        now = clock.now()
        try:
            session.add(
                WebhookDelivery(
                    id=completion_id, fingerprint=body_fingerprint, received_at=now, claimed_at=now
                )
            )
            session.commit()
            return Claim(True)
        except IntegrityError:
            session.rollback()
        existing = session.get(WebhookDelivery, completion_id, populate_existing=True)
        if existing is None:
            continue  # released between our insert and this read: claim it again
        if (
            existing.answered_at is None
            and existing.fingerprint == body_fingerprint
            and existing.claimed_at < now - CLAIM_TIMEOUT
        ):
            chosen = existing.action_id
            taken = session.execute(
                update(WebhookDelivery)
                .where(
                    WebhookDelivery.id == completion_id,
                    WebhookDelivery.answered_at.is_(None),
                    WebhookDelivery.claimed_at == existing.claimed_at,
                )
                .values(claimed_at=now)
                .execution_options(synchronize_session=False)
            )
            session.commit()
            if getattr(taken, "rowcount", 0) == 1:
                return Claim(True, action_id=chosen)
            existing = session.get(WebhookDelivery, completion_id, populate_existing=True)
            if existing is None:
                continue
        session.expunge(existing)
        return Claim(False, existing)
    raise RuntimeError(f"could not claim webhook delivery {completion_id!r}")  # pragma: no cover


def aim(completion_id: str, action_id: int) -> None:
    """Record which action the delivery holding the claim is about to complete."""
    db.session.execute(
        update(WebhookDelivery)
        .where(WebhookDelivery.id == completion_id)
        .values(action_id=action_id)
        .execution_options(synchronize_session=False)
    )
    db.session.commit()


def answer(completion_id: str, status_code: int, response: dict[str, Any], action_id: int | None) -> None:
    """Store the answer of the delivery that holds the claim."""
    db.session.execute(
        update(WebhookDelivery)
        .where(WebhookDelivery.id == completion_id)
        .values(status_code=status_code, response=response, action_id=action_id, answered_at=clock.now())
        .execution_options(synchronize_session=False)
    )
    db.session.commit()


def release(completion_id: str) -> None:
    """Give the id up: nothing was completed, and a later delivery may try again."""
    db.session.rollback()
    db.session.execute(
        delete(WebhookDelivery)
        .where(WebhookDelivery.id == completion_id, WebhookDelivery.answered_at.is_(None))
        .execution_options(synchronize_session=False)
    )
    db.session.commit()
