"""Compensating: an action that finally fails, times out or is cancelled undoes the steps
it completed, the last completed first, one compensation at a time, before it ends so.

Each compensation runs as a child action of the action, on a step of its own (``STEP_INDEX``)
that waits on it like any step waits on a child: admitted, performed, retried and swept as
any action is. Meanwhile the action is ``compensating``: it keeps its lane, and the steps
waiting on it keep waiting (they conclude when it ends). A compensation that fails leaves
it compensating, for an operator to retry or skip the failed compensating action, after
which it carries on. A step still waiting on children when its action is cancelled lets
them compensate first (the cancel cascades to them and waits on them): a cancelled tree
compensates from the leaves up.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, func, select
from sqlalchemy.orm import Session

from . import arguments, broker, clock, history, registry, status
from .action import Action, error_class, error_data, write_status
from .compensation import STEP_INDEX, Compensation, child_results, resolve
from .errors import ActorNotFound, ArgumentError, UnknownAction
from .invocation import Invocation, request
from .step import Step

#: The statuses an action compensates before it ends with.
UNDONE_ON: frozenset[str] = frozenset({status.FAILED, status.CANCELLED, status.TIMED_OUT})

#: The compensations still to run when ``action_id`` compensates: those of its steps that
#: succeeded, the last completed step's first (and, within a step, the last registered).
_ARMED = (
    select(Compensation)
    .join(Step, Step.id == Compensation.step_id)
    .where(
        Compensation.action_id == bindparam("action_id"),
        Compensation.status == status.COMPENSATION_REGISTERED,
        Step.status == status.STEP_SUCCEEDED,
    )
    .order_by(Step.completed_at.desc(), Step.id.desc(), Compensation.id.desc())
)
#: A step of the action that waits on children: they conclude (compensate) first.
_WAITING = (
    select(Step.id)
    .where(
        Step.action_id == bindparam("action_id"),
        Step.definition_index != STEP_INDEX,
        Step.completed_at.is_(None),
        Step.performed_at.is_not(None),
    )
    .limit(1)
)
#: The compensations of the action not yet done, in turn.
_UNDONE = (
    select(Compensation)
    .where(
        Compensation.action_id == bindparam("action_id"),
        Compensation.status.in_(
            (status.COMPENSATION_QUEUED, status.COMPENSATION_RUNNING, status.COMPENSATION_FAILED)
        ),
    )
    .order_by(Compensation.sequence)
)
_OF_STEP = select(Compensation).where(Compensation.compensation_step_id == bindparam("step_id"))
_VISITS = select(func.max(Step.visit)).where(
    Step.action_id == bindparam("action_id"), Step.definition_index == STEP_INDEX
)


def begin(
    session: Session,
    action: Action,
    to: str,
    *,
    cause: str,
    by: str | None,
    note: str | None,
    error: BaseException | None,
    only_from: frozenset[str] | None,
) -> bool:
    """Instead of completing ``action`` with ``to``, start compensating it, if steps it
    completed registered compensations: False (nothing changed) when none did, or when it
    is no longer in a status it may compensate from (another transaction completed it)."""
    armed = session.scalars(_ARMED, {"action_id": action.id}).all()
    if not armed:
        return False
    if not write_status(session, action, status.COMPENSATING, only_from):
        return False
    if error is not None:
        action.record_error(error)
    for number, row in enumerate(armed, 1):
        row.status, row.sequence, row.ends_as = status.COMPENSATION_QUEUED, number, to
    data: dict[str, Any] = {"status": to, "compensations": [row.id for row in armed]}
    if note:
        data["note"] = note
    if error is not None:
        data.update(error_data(error))
    history.record(session, action, "compensating", cause=cause, by=by, **data)
    # A cancel cascades down the tree: the children it waits on conclude (compensated)
    # first. A failure or a timeout does not wait for children still running elsewhere.
    if to != status.CANCELLED or session.scalar(_WAITING, {"action_id": action.id}) is None:
        start_next(session, action)
    return True


def concluded(session: Session, action: Action, step: Step) -> str | None:
    """A step of the compensating ``action`` concluded: a compensation's (it succeeded or
    failed), or one that waited on children (they have compensated). Start the next
    compensation; the status the action ends with when none is left (None: it keeps
    compensating, with one running or failed)."""
    if step.definition_index != STEP_INDEX:
        if step.status == status.STEP_SUCCEEDED:
            _arm_late(session, action, step)
        if session.scalar(_WAITING, {"action_id": action.id}) is not None:
            return None
        return _done(session, action) if start_next(session, action) else None
    row = session.scalars(_OF_STEP, {"step_id": step.id}).one_or_none()
    if row is None:
        return None
    if step.status != status.STEP_SUCCEEDED:
        _failed(session, action, row, step_id=step.id, undoes_step_id=row.step_id)
        return None
    row.status, row.completed_at = status.COMPENSATION_SUCCEEDED, clock.now()
    history.record(
        session,
        action,
        "compensation_succeeded",
        step_id=step.id,
        compensation_id=row.id,
        name=row.name,
        undoes_step_id=row.step_id,
    )
    return _done(session, action, row.ends_as) if start_next(session, action) else None


def _arm_late(session: Session, action: Action, step: Step) -> None:
    """``step`` succeeded after its action began compensating (it waited on children, or
    its body returned meanwhile): what it registered runs next, as the last completed step's."""
    late = session.scalars(_REGISTERED, {"step_id": step.id}).all()
    if not late:
        return
    turns = session.scalars(_TURNS, {"action_id": action.id}).all()
    ends_as = next((row.ends_as for row in turns if row.ends_as), None)
    for row in late:
        row.status, row.ends_as = status.COMPENSATION_QUEUED, ends_as
    # In turn after those that ran (or run), before those still queued.
    begun = [row for row in turns if row.status != status.COMPENSATION_QUEUED]
    queued = [row for row in turns if row.status == status.COMPENSATION_QUEUED]
    for number, row in enumerate([*begun, *late, *queued], 1):
        row.sequence = number
    history.record(
        session, action, "compensations_added", step_id=step.id, compensations=[row.id for row in late]
    )


_REGISTERED = (
    select(Compensation)
    .where(
        Compensation.step_id == bindparam("step_id"),
        Compensation.status == status.COMPENSATION_REGISTERED,
    )
    .order_by(Compensation.id.desc())
)
#: The action's compensations that have their turn, in turn.
_TURNS = (
    select(Compensation)
    .where(Compensation.action_id == bindparam("action_id"), Compensation.sequence.is_not(None))
    .order_by(Compensation.sequence)
)


def too_late(session: Session, action: Action, step: Step) -> None:
    """``step`` succeeded after its action had ended (failed, timed out, cancelled): what it
    registered can no longer run in turn, so it fails, visibly, for an operator to undo by hand."""
    if step.status != status.STEP_SUCCEEDED or action.status not in UNDONE_ON:
        return
    for row in session.scalars(_REGISTERED, {"step_id": step.id}).all():
        row.ends_as = action.status
        row.error_class = "engine.compensating.too_late"
        row.error_message = (
            f"step {step.id} succeeded after action {action.id} had ended {action.status}: "
            f"{row.name} on {row.actor_type}/{row.actor_id} never ran; undo its work by hand"
        )
        _failed(
            session,
            action,
            row,
            step_id=step.id,
            error_class=row.error_class,
            error_message=row.error_message,
        )


def start_next(session: Session, action: Action) -> bool:
    """Start the action's next queued compensation, unless one is running or failed (one
    at a time, in turn). True when none is left to run or running."""
    undone = session.scalars(_UNDONE, {"action_id": action.id}).all()
    if not undone:
        return True
    if undone[0].status == status.COMPENSATION_QUEUED and all(
        row.status == status.COMPENSATION_QUEUED for row in undone
    ):
        _start(session, action, undone[0])
    return False


def _start(session: Session, action: Action, row: Compensation) -> None:
    """Run ``row`` as a child action on a step of its own, its placeholders filled in with
    the results of the children of the step it undoes."""
    now = clock.now()
    try:
        actor = registry.load_actor(session, row.actor_type, row.actor_id)
        stored = resolve(row.arguments_json, child_results(session, row.step_id))
        invocation = request(actor, row.name, arguments.load(session, stored))
    except (ActorNotFound, UnknownAction, ArgumentError) as error:
        # Nothing can run it: it failed, for an operator to see (and skip, or fix and retry).
        row.error_class, row.error_message = error_class(error), str(error)[:2000]
        _failed(session, action, row, **error_data(error))
        return
    # Each run of a compensation is a visit of the action's compensation steps (a retried
    # one that never became an action runs on a new step).
    visits = session.scalar(_VISITS, {"action_id": action.id}) or 0
    step = Step(
        action_id=action.id,
        definition_index=STEP_INDEX,
        visit=visits + 1,
        status=status.STEP_PERFORMING,
        started_at=now,
        performed_at=now,  # no body: it only waits on its child
        pending_actions_count=1,
        unsuccessful_actions_count=0,
    )
    session.add(step)
    session.flush()
    invocation.parent_step_id = step.id
    session.add(invocation)
    session.flush()
    broker.admit_soon(session, invocation.id)
    row.status, row.started_at = status.COMPENSATION_RUNNING, now
    row.compensation_step_id, row.invocation_id = step.id, invocation.id
    history.record(
        session,
        action,
        "compensation_started",
        step_id=step.id,
        invocation_id=invocation.id,
        compensation_id=row.id,
        name=row.name,
        undoes_step_id=row.step_id,
    )


def _failed(session: Session, action: Action, row: Compensation, **data: Any) -> None:
    """``row`` failed (its action failed, it could not start, or it can no longer run in
    turn): the action keeps compensating, shown as needing an operator."""
    row.status, row.completed_at = status.COMPENSATION_FAILED, clock.now()
    history.record(session, action, "compensation_failed", compensation_id=row.id, name=row.name, **data)


def _done(session: Session, action: Action, ends_as: str | None = None) -> str:
    """Every compensation ran: the status the action now ends with."""
    if ends_as is None:
        ends_as = session.scalar(
            select(Compensation.ends_as)
            .where(Compensation.action_id == action.id, Compensation.ends_as.is_not(None))
            .order_by(Compensation.sequence.desc(), Compensation.id.desc())
            .limit(1)
        )
    final = ends_as or status.FAILED
    history.record(session, action, "compensated", status=final)
    return final


def holds(action: Action) -> bool:
    """Whether ``action`` is compensating: what waits on it keeps waiting."""
    return action.status == status.COMPENSATING


# --- an operator's remedies for a failed compensation (engine/commands retry and skip) --------


def failed(session: Session, action: Action) -> Compensation | None:
    """The compensation of ``action`` that failed (compensation stopped at it), if any."""
    return session.scalars(
        select(Compensation)
        .where(Compensation.action_id == action.id, Compensation.status == status.COMPENSATION_FAILED)
        .order_by(Compensation.sequence)
        .limit(1)
    ).first()


def action_of(session: Session, row: Compensation) -> Action | None:
    """The action that ran ``row`` (None: it never became one: it could not start, it
    deadlocked, its before hook refused it)."""
    if row.invocation_id is None:
        return None
    action_id = session.scalar(select(Invocation.action_id).where(Invocation.id == row.invocation_id))
    return session.get(Action, action_id, populate_existing=True) if action_id is not None else None


def resumed(session: Session, action: Action, step: Step, *, cause: str, by: str | None) -> None:
    """The failed compensating action that ``step`` (a compensation's) waits on was
    retried or skipped: the compensation runs again."""
    row = session.scalars(_OF_STEP, {"step_id": step.id}).one_or_none()
    if row is None or row.status != status.COMPENSATION_FAILED:
        return
    row.status, row.completed_at = status.COMPENSATION_RUNNING, None
    history.record(
        session,
        action,
        "compensation_retried",
        cause=cause,
        by=by,
        step_id=step.id,
        compensation_id=row.id,
        name=row.name,
    )


def restart(session: Session, action: Action, row: Compensation, *, cause: str, by: str | None) -> None:
    """Run the failed ``row`` again, as a new child action (its placeholders filled in again)."""
    row.status, row.completed_at = status.COMPENSATION_QUEUED, None
    row.error_class = row.error_message = None
    history.record(
        session, action, "compensation_retried", cause=cause, by=by, compensation_id=row.id, name=row.name
    )
    start_next(session, action)


def skip(
    session: Session, action: Action, row: Compensation, *, cause: str, by: str | None, note: str | None
) -> str | None:
    """An operator undid by hand what ``row`` undoes: compensation carries on. The status the
    action ends with when nothing is left (the caller completes it)."""
    row.status, row.completed_at = status.COMPENSATION_SUCCEEDED, clock.now()
    data: dict[str, Any] = {"note": note} if note else {}
    history.record(
        session,
        action,
        "compensation_skipped",
        cause=cause,
        by=by,
        compensation_id=row.id,
        name=row.name,
        **data,
    )
    return _done(session, action, row.ends_as) if start_next(session, action) else None
