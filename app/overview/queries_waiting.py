"""What waits for the world, for the overview's "Waiting for a person": outbound actions
performing (an approval, a webhook) and actions whose step waits for a signal, with what
each waits for and until when."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from engine import status
from engine.inbox import APPROVED
from engine.models import Action, Invocation, Step
from engine.signal import SIGNAL_WAIT

from ..actions.queries import ActionRow, rows, select_rows
from ..queries import CAP, Count, capped_count

#: Waiting actions shown by the overview.
TOP = 20


#: Actions performing that wait for the world: outbound ones (an approval, a webhook) and
#: those whose step waits for a signal (an approval, a partner's callback).
_SIGNAL_WAITERS = (
    select(Step.action_id)
    .join(Invocation, Invocation.parent_step_id == Step.id)
    .where(Invocation.kind == "wait", Invocation.name == SIGNAL_WAIT, Invocation.concluded_at.is_(None))
)
WAITING = (Action.status == status.PERFORMING, or_(Action.outbound.is_(True), Action.id.in_(_SIGNAL_WAITERS)))


@dataclass(frozen=True)
class SignalWait:
    """What a waiting action's step waits for, and until when (None: no deadline)."""

    names: list[str]
    until: datetime | None

    @property
    def approval(self) -> bool:
        return APPROVED in self.names


def signal_waits(session: Session, action_ids: list[int]) -> dict[int, SignalWait]:
    """The open waits for signals of these actions, merged per action (the earliest deadline)."""
    if not action_ids:
        return {}
    found: dict[int, SignalWait] = {}
    for action_id, names, until in session.execute(
        select(Step.action_id, Invocation.arguments_json, Invocation.due_at)
        .join(Invocation, Invocation.parent_step_id == Step.id)
        .where(
            Step.action_id.in_(action_ids),
            Invocation.kind == "wait",
            Invocation.name == SIGNAL_WAIT,
            Invocation.concluded_at.is_(None),
        )
        .order_by(Invocation.id)
    ):
        seen = found.get(action_id)
        merged = [*(seen.names if seen else []), *[n for n in names or [] if not seen or n not in seen.names]]
        deadlines = [d for d in (seen.until if seen else None, until) if d is not None]
        found[action_id] = SignalWait(merged, min(deadlines) if deadlines else None)
    return found


def waiting_for_people(session: Session, limit: int = TOP) -> tuple[list[ActionRow], Count]:
    """Outbound actions performing (waiting for an approval or an outside completion), the
    oldest first, and how many there are (capped): the range of ``ix_stepwise_actions_status``
    for performing, which holds only live work."""
    query = select_rows().where(*WAITING)
    return rows(session, query.order_by(Action.id).limit(limit)), waiting_count(session)


def waiting_count(session: Session, cap: int = CAP) -> Count:
    """Outbound actions performing: waiting for an approval or an outside completion."""
    ids: Any = select(Action.id).where(*WAITING)
    return capped_count(session, ids, cap)
