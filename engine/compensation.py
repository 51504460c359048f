"""Compensations: the action that undoes what a step did, registered by its body and run
(engine/compensating.py) when the step's action finally fails or is cancelled.

A compensation is a row from the moment its step's body returns: registered with the
step's other changes, so a body that failed registers nothing. Its arguments may name the
results of the step's children (``step.child_result("charge")``), which are known only
once the step concluded: they are stored as placeholders and filled in when it starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import JSON, BigInteger, ForeignKey, Index, String, Text, bindparam, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from . import arguments, clock, history, registry, status
from .action import Action
from .db import Base, Id, Timestamps, partial_index
from .errors import ArgumentError
from .invocation import Invocation

if TYPE_CHECKING:
    from .step import Step

#: The ``definition_index`` of the step that runs a compensation (it waits on the
#: compensating child action): not a step of the definition, so nothing that looks for
#: the action's current step or its visits ever finds it.
STEP_INDEX = -1


class Compensation(Timestamps, Base):
    __tablename__ = "stepwise_compensations"
    __table_args__ = (
        Index("ix_stepwise_compensations_action", "action_id", "id"),
        # The step of the action that runs it: the compensation a concluding step stands for.
        Index("ix_stepwise_compensations_step", "compensation_step_id"),
        # The overview's "needs attention": compensations that failed, a few rows at most.
        partial_index(
            "ix_stepwise_compensations_failed",
            "action_id",
            where="status = 'failed'",
        ),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    #: The action it belongs to, and the step (an execution) whose work it undoes.
    action_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("stepwise_actions.id"))
    step_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("stepwise_steps.id"))
    #: The action that undoes it: its actor and name, and its arguments in the form of
    #: ``engine.arguments`` with placeholders for children's results.
    actor_type: Mapped[str] = mapped_column(String(255))
    actor_id: Mapped[str] = mapped_column(String(255))
    name: Mapped[str] = mapped_column(String(255))
    arguments_json: Mapped[list[Any]] = mapped_column("arguments", JSON, default=list)
    status: Mapped[str] = mapped_column(String(20), default=status.COMPENSATION_REGISTERED)
    #: Its turn among the action's compensations (1 runs first), once queued.
    sequence: Mapped[int | None]
    #: The status the action ends with once its compensations have run.
    ends_as: Mapped[str | None] = mapped_column(String(20))
    #: The step of the action that runs it, and the invocation of the compensating action.
    compensation_step_id: Mapped[int | None] = mapped_column(BigInteger)
    invocation_id: Mapped[int | None] = mapped_column(BigInteger)
    #: Why it could not start (its actor or action is gone, a placeholder names no child).
    error_class: Mapped[str | None] = mapped_column(String(255))
    error_message: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[datetime | None]
    completed_at: Mapped[datetime | None]

    def __repr__(self) -> str:
        return f"<Compensation {self.id} action={self.action_id} {self.name} {self.status}>"


@dataclass(frozen=True)
class ChildResult:
    """A placeholder in a compensation's arguments: the result of one child of the step
    that registers it (by its action name, the first child of that name, or by its
    position among the step's children), filled in when the compensation starts."""

    name: str | None = None
    index: int | None = None

    def __repr__(self) -> str:
        return (
            f"step.child_result({self.name!r})"
            if self.name is not None
            else f"step.child_result({self.index})"
        )


#: The tag of a placeholder in stored arguments (``engine.arguments`` refuses it in user dicts).
_PLACEHOLDER = "child_result"


def dump(values: Any) -> Any:
    """The stored form of a compensation's arguments: ``engine.arguments`` with
    placeholders for children's results."""
    if isinstance(values, ChildResult):
        return {arguments.TAG: _PLACEHOLDER, "name": values.name, "index": values.index}
    if isinstance(values, (list, tuple)):
        return [dump(v) for v in values]
    if isinstance(values, dict):
        if arguments.TAG in values or not all(isinstance(k, str) for k in values):
            return arguments.dump(values)  # refused, with the usual message
        return {k: dump(v) for k, v in values.items()}
    return arguments.dump(values)


def resolve(stored: Any, results: list[tuple[str, Any]]) -> Any:
    """``stored`` with its placeholders replaced by the stored results of the step's
    children (``results``: each child's name and stored result, in the order requested)."""
    if isinstance(stored, list):
        return [resolve(v, results) for v in stored]
    if isinstance(stored, dict):
        if stored.get(arguments.TAG) == _PLACEHOLDER:
            name, index = stored.get("name"), stored.get("index")
            if name is not None:
                for child, result in results:
                    if child == name:
                        return result
                names = ", ".join(sorted({child for child, _ in results})) or "none"
                raise ArgumentError(f"the step started no child {name!r} (its children: {names})")
            if isinstance(index, int) and 0 <= index < len(results):
                return results[index][1]
            raise ArgumentError(f"the step started {len(results)} children, not a child #{index}")
        if arguments.TAG in stored:
            return stored
        return {k: resolve(v, results) for k, v in stored.items()}
    return stored


_CHILD_RESULTS = (
    select(Invocation.name, Action.result)
    .outerjoin(Action, Action.id == Invocation.action_id)
    .where(Invocation.parent_step_id == bindparam("step_id"), Invocation.kind == "action")
    .order_by(Invocation.id)
)


def child_results(session: Session, step_id: int) -> list[tuple[str, Any]]:
    """Each child of the step (its action name and stored result), in the order requested."""
    return [(name, result) for name, result in session.execute(_CHILD_RESULTS, {"step_id": step_id})]


def register(session: Session, step: Step, action: Action, pending: list[tuple[Any, str, Any]]) -> None:
    """Record the compensations a body registered (actor, action name, stored arguments),
    once it returned; the action counts them, so that only an action with some reads them
    when it fails."""
    now = clock.now()
    rows = []
    for actor, name, stored in pending:
        actor_type, actor_id = registry.actor_ref(actor)
        rows.append(
            Compensation(
                action_id=action.id,
                step_id=step.id,
                actor_type=actor_type,
                actor_id=actor_id,
                name=name,
                arguments_json=stored,
                status=status.COMPENSATION_REGISTERED,
                created_at=now,
            )
        )
    session.add_all(rows)
    session.flush()
    action.compensations_count = (action.compensations_count or 0) + len(rows)
    for row in rows:
        history.record(
            session,
            action,
            "compensation_registered",
            step_id=step.id,
            compensation_id=row.id,
            name=row.name,
            actor=f"{row.actor_type}/{row.actor_id}",
        )


def undone(session: Session, action: Action) -> bool:
    """Whether compensations of ``action`` ran (it compensated, or is compensating): its
    completed steps were undone, so it must not carry on where it stopped. No query for an
    action that registered none."""
    if not action.compensations_count:
        return False
    return (
        session.scalar(
            select(Compensation.id)
            .where(
                Compensation.action_id == action.id,
                Compensation.status != status.COMPENSATION_REGISTERED,
            )
            .limit(1)
        )
        is not None
    )
