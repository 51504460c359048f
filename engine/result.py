"""Results: what an action returns, and how the step after a step with children reads
what each child came to.

An action's result is what its last step returned (or a ``finish`` decision's result, or
the payload of its outbound completion), stored in the form of ``engine.arguments`` so that
actors, datetimes and decimals keep their type. Reading never changes anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session, object_session

from . import arguments, status
from .action import Action
from .errors import ArgumentError
from .invocation import Invocation
from .step import Step

#: What an invocation that never became an action came to, as an action status.
_UNADMITTED = {
    "skipped": status.SUCCEEDED,  # an achievement had done the work
    "succeeded": status.SUCCEEDED,  # its before hook completed it
    "cancelled": status.CANCELLED,
    "failed": status.FAILED,
    "deadlocked": status.DEADLOCKED,
}


@dataclass(frozen=True)
class Child:
    """One child a step requested, as the next step sees it."""

    name: str
    #: The action it waited on (its own, the one it was attached to, or the one that
    #: superseded it); None when it never became an action (skipped, failed, …).
    action_id: int | None
    #: The action's status, or what the invocation came to when it never became one.
    status: str
    result: Any
    error_message: str | None

    @property
    def succeeded(self) -> bool:
        return self.status == status.SUCCEEDED


def result_of(action: Action) -> Any:
    """The result of ``action`` in its Python form (``None`` until it has one); actors in it
    are loaded in the action's session."""
    session = object_session(action)
    if session is None:
        raise ArgumentError(f"action {action.id} is not in a session: read its result in one")
    return value(session, action.result)


def value(session: Session, stored: Any) -> Any:
    """A stored result in its Python form (actors loaded in ``session``)."""
    return arguments.load(session, stored) if stored is not None else None


_PREVIOUS = (
    select(Step)
    .where(Step.action_id == bindparam("action_id"), Step.id < bindparam("step_id"))
    .order_by(Step.id.desc())
    .limit(1)
)
_CHILDREN = (
    select(Invocation, Action)
    .outerjoin(Action, Action.id == Invocation.action_id)
    .where(Invocation.parent_step_id == bindparam("step_id"), Invocation.kind == "action")
    .order_by(Invocation.id)
)


def previous_step(session: Session, step: Step) -> Step | None:
    """The step of the same action that ran just before ``step`` (the one that went on to it)."""
    return session.scalars(_PREVIOUS, {"action_id": step.action_id, "step_id": step.id}).first()


def children(session: Session, step: Step) -> list[Child]:
    """What each child ``step`` requested came to, in the order it requested them."""
    found = []
    for invocation, action in session.execute(_CHILDREN, {"step_id": step.id}):
        if action is not None:
            child_status, stored, message = action.status, action.result, action.error_message
        else:
            child_status = _UNADMITTED.get(invocation.outcome or "", status.PENDING)
            stored, message = None, invocation.error_message
        found.append(
            Child(
                name=invocation.name,
                action_id=invocation.action_id,
                status=child_status,
                result=value(session, stored),
                error_message=message,
            )
        )
    return found
