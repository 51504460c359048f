"""What the overview shows of compensations: the trees whose compensation failed and that
wait for an operator (retry or skip the failed compensating action). It only reads."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from engine import status
from engine.models import Action, Compensation

from ..actions.queries import ActionRow, rows, select_rows
from ..queries import Count, capped_count

#: Actions compensating whose compensation failed (``ix_stepwise_compensations_failed``).
_STUCK = (
    select(Compensation.action_id)
    .join(Action, Action.id == Compensation.action_id)
    .where(Compensation.status == status.COMPENSATION_FAILED, Action.status == status.COMPENSATING)
)


def failed_compensations(session: Session, limit: int = 5) -> tuple[list[ActionRow], Count]:
    """The newest actions whose compensation failed (each waits for an operator), and how
    many trees hold one (capped)."""
    ids = _STUCK.distinct().subquery()
    found = rows(
        session,
        select_rows().where(Action.id.in_(select(ids.c.action_id))).order_by(Action.id.desc()).limit(limit),
    )
    trees: Any = (
        select(func.coalesce(Action.root_id, Action.id))
        .where(Action.id.in_(select(ids.c.action_id)))
        .distinct()
    )
    return found, capped_count(session, trees)
