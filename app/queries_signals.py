"""The action page's signals: what its steps wait for and until when, its inbox (every signal
sent to it, consumed or kept), and the decisions its steps took. Read models: rows and
times; the template words them."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from engine import status
from engine.models import Action, Step

from . import queries_api


def panel(session: Session, action: Action) -> dict[str, Any]:
    """The signals panel's context: ``inbox``, ``waits`` and the steps' ``decisions``."""
    decisions = dict(
        session.execute(
            select(Step.id, Step.decision).where(Step.action_id == action.id, Step.decision.is_not(None))
        ).all()
    )
    return {
        "inbox": queries_api.inbox_of(session, action.id),
        "waits": queries_api.open_waits_of(session, action.id),
        "decisions": decisions,
        "signallable": action.status in status.INCOMPLETE,
    }
