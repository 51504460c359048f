"""The action page's signals: what its steps wait for and until when (from the tree already
loaded), its inbox (every signal sent to it, consumed or kept: one query), and the decisions
its steps took. Read models: rows and times; the template words them."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from engine import status
from engine.models import Action, Signal
from engine.signal import SIGNAL_WAIT

from .tree_model import StepNode


def panel(session: Session, action: Action, steps: list[StepNode]) -> dict[str, Any]:
    """The signals panel's context: ``inbox``, ``waits`` and the ``decisions`` of ``steps``
    (the action's, as the tree loaded them)."""
    decisions = {step.id: step.decision for step in steps if step.decision}
    waits = [
        invocation
        for step in steps
        for invocation in step.invocations
        if invocation.kind == "wait" and invocation.name == SIGNAL_WAIT and invocation.concluded_at is None
    ]
    return {
        "inbox": inbox_of(session, action.id),
        "waits": sorted(waits, key=lambda wait: wait.id),
        "decisions": decisions,
        "signallable": action.status in status.INCOMPLETE,
    }


def inbox_of(session: Session, action_id: int) -> list[Signal]:
    """Every signal sent to the action, oldest first (consumed or still in its inbox)."""
    return list(session.scalars(select(Signal).where(Signal.action_id == action_id).order_by(Signal.id)))
