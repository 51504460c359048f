"""Closing a lane: the statement that completes a lane's current action (on PostgreSQL)
also removes the lane when no other member is left, and, when the action's last step
succeeded the common way, writes that step too (engine/completion.py uses it).

The lane's lock is always taken before, by a statement of its own: PostgreSQL (READ
COMMITTED) reads with the snapshot a statement began with, so a statement that waited for
that lock inside itself would not see an action queued in the lane meanwhile, and would
remove the lane under it (``tests/test_an_action_queued_while_its_lane_completes_is_not_stranded.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Executable, Update
from sqlalchemy.orm import Session

from . import performance, status
from .action import Action
from .errors import ActorNotFound, ArgumentError, UnknownAction
from .performance import Performance
from .step import Step
from .step import writing as step_writing


@dataclass
class Lane:
    """The lane of an action completing as its current one, to be removed with the
    completion's own statement if no other member is left (``finalize``); that statement
    also writes the completing step's changes, when given (``step.changes``)."""

    lane: Performance
    rows: list[Any] = field(default_factory=list)
    step_id: int | None = None
    step_written: dict[str, Any] = field(default_factory=dict)

    @property
    def closed(self) -> bool:
        return any(row[1] is not None for row in self.rows)

    def parameters(self, completing_id: int) -> dict[str, Any]:
        parameters: dict[str, Any] = {"c_lane_id": self.lane.id, "c_key": self.lane.concurrency_key}
        parameters["c_completing_id"] = completing_id
        if self.step_written:
            parameters["s_id"] = self.step_id
            parameters.update({f"s_{key}": value for key, value in self.step_written.items()})
        return parameters

    def statement(self, guarded: Update) -> Executable:
        """The completing statement (``write_status``'s ``joined``)."""
        also = step_writing(tuple(sorted(self.step_written))) if self.step_written else None
        return performance.closing(guarded, also)


def on_postgres(session: Session) -> bool:
    return session.get_bind().dialect.name == "postgresql"


def ends_here(session: Session, action: Action, step: Step) -> bool:
    """Whether this step ends its action the common way (PostgreSQL): the last step of a
    performing action (not outbound, without compensations) succeeded without a decision.
    Its own write then rides in the statement that completes the action: one statement
    fewer (``Lane``). The lane is still locked first, by a statement of its own."""
    if (
        action.status != status.PERFORMING
        or action.compensations_count
        or action.outbound
        or step.status == status.STEP_FAILED
        or step.decision
        or not on_postgres(session)
    ):
        return False
    try:
        return len(action.definition.all_steps()) <= action.current_step_index + 1
    except (ActorNotFound, UnknownAction, ArgumentError):
        return False  # accomplished fails it as changed by a deploy
