"""Completion: an action's way through its steps to a final status, and what follows.

``perform`` starts an action (pending -> performing) and opens its current step; a step
concludes when its last child does (``conclude``), its action moves to the next step or
completes (``accomplished``), and a completed action leaves its lane, lets the lane's next
action perform (``forward``) and concludes the steps waiting on it (``conclude_waiters``).
These call each other (a completion concludes a parent's step, which may complete the
parent), so they live in one module. Locks are taken lane first, then steps, then
actions; an action completes at most once (invariant 2) and counters never strand
(invariant 3).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import bindparam, func, select
from sqlalchemy.orm import Session

from . import achievement, advancing, broker, clock, compensating, concluding, history, performance, status
from .action import Action, error_data, write_status
from .callbacks import run_callbacks
from .closing import Lane, ends_here, on_postgres
from .errors import ActorNotFound, ArgumentError, Failed, InvalidTransition, LoopLimit, UnknownAction
from .performance import Performance, set_current
from .recovery import recovering
from .step import Step, close_unperformed, decrement, mark_written, open_step
from .step import changes as step_changes


def perform(session: Session, action: Action, cause: str = history.WORKER, **values: Any) -> None:
    """pending -> performing: start the clock, erase achievements under its key, and create
    its current step (run after commit). ``values`` are written with the status."""
    reopened = action.started_at is not None
    now = clock.now()
    deadline = now + timedelta(seconds=action.timeout_seconds) if action.timeout_seconds else None
    # The achievement records the last known good state of what the key stands for;
    # starting new work on the key makes that state unknown. On PostgreSQL its erasure
    # rides in the guarded UPDATE's statement (a CTE), on SQLite it follows it.
    on_postgres = session.connection().dialect.name == "postgresql"
    if not write_status(
        session,
        action,
        status.PERFORMING,
        joined=achievement.erasing if on_postgres else None,
        joined_parameters={"erase_key": action.checksum_key},
        started_at=now,
        deadline_at=deadline,
        **values,
    ):
        raise InvalidTransition(f"action {action.id} is {action.status}, not pending")
    if not on_postgres:
        achievement.erase(session, action.checksum_key)
    history.record(session, action, "started", cause=cause)
    if reopened:
        resume_step(session, action)  # an operator's retry: carry on where it stopped
    else:
        open_step(session, action)
    if action.timeout_seconds:
        broker.enqueue(session, broker.TIMEOUT, action.id, delay=timedelta(seconds=action.timeout_seconds))


def accomplished(session: Session, action: Action, step: Step) -> None:
    """A step of ``action`` concluded: fail the action, start the next step (or the one
    its body decided on), or complete it (an outbound action stays performing until
    something completes it)."""
    lane = performance.lock(session, action.concurrency_key)
    if action.compensations_count and action.status == status.PERFORMING:
        session.refresh(action, ["status"])  # a cancel or a timeout may have begun compensating
    if action.status == status.COMPENSATING:  # a compensation (or what it waited for) concluded
        ends_as = compensating.concluded(session, action, step)
        if ends_as is not None:
            forward(session, lane, action, ends_as, note="compensated", only_from=_COMPENSATING)
        return
    if action.compensations_count:  # ended while this step waited: what it registered never runs
        compensating.too_late(session, action, step)
    # Under the lane's lock, the action's status is read afresh: a timeout or an outside
    # completion may have completed it while its step body ran. When this step ends the
    # action, the guarded write of its completion is that read (one statement, not two).
    if step.status == status.STEP_FAILED:
        recovery = recovering(session, action, step)  # None unless the step declares recover=
        if recovery is not None:
            return _decided(session, lane, action, step, *recovery)
        forward(session, lane, action, status.FAILED, unperformed_steps=False, only_from=_PERFORMING)
        return
    decision = step.decision or {}
    try:
        definition = action.definition
        steps = len(definition.all_steps())
        target = definition.step_index(decision["go_to"]) if "go_to" in decision else None
    except (ActorNotFound, UnknownAction, ArgumentError) as gone:  # a deploy changed it meanwhile
        forward(
            session, lane, action, status.FAILED, error=gone, unperformed_steps=False, only_from=_PERFORMING
        )
        return
    if decision:
        return _decided(session, lane, action, step, decision, target)
    if steps <= action.current_step_index + 1 and not action.outbound:
        _succeed(session, lane, action, step)
        return
    if steps > action.current_step_index + 1:
        # The move to the next step is the guarded read: it matches only a performing
        # action (one statement instead of a refresh of the status and then an UPDATE).
        # After a loop back (a decision), the next step may have run before: a new visit.
        # That UPDATE returns how often (no statement of its own).
        visits = advancing.advance(session, action, action.current_step_index + 1)
        if visits is None:
            session.refresh(action, ["status"])
            return
        action.store_arguments()
        open_step(session, action, visit=visits + 1)
    else:
        session.refresh(action, ["status"])
        if action.status == status.PERFORMING:
            history.record(session, action, "awaiting_completion")


def _succeed(
    session: Session,
    lane: Performance | None,
    action: Action,
    step: Step,
    step_written: tuple[int, dict[str, Any]] | None = None,
) -> None:
    """The action's last step succeeded: it succeeds with that step's result."""
    forward(
        session,
        lane,
        action,
        status.SUCCEEDED,
        unperformed_steps=False,
        only_from=_PERFORMING,
        result=step.result,
        step_written=step_written,
    )


def _decided(
    session: Session,
    lane: Performance | None,
    action: Action,
    step: Step,
    decision: dict[str, Any],
    target: int | None,
) -> None:
    """Carry out the decision of ``step``'s body: finish, fail, or go to step ``target``."""
    names = action.definition.step_names()
    source = names[step.definition_index] if step.definition_index < len(names) else None
    if "finish" in decision:
        history.record(session, action, "decided", step_id=step.id, finish=True, step=source)
        forward(session, lane, action, status.SUCCEEDED, only_from=_PERFORMING, result=step.result)
        return
    if "fail" in decision:
        history.record(session, action, "decided", step_id=step.id, fail=decision["fail"], step=source)
        forward(session, lane, action, status.FAILED, error=Failed(decision["fail"]), only_from=_PERFORMING)
        return
    assert target is not None
    visits = session.scalar(_VISITS, {"action_id": action.id, "index": target}) or 0
    cap = action.definition.max_visits(target)
    if visits >= cap:
        error = LoopLimit(
            f"action {action.id} ({action.name}) would run step {names[target]!r} a {visits + 1}th "
            f"time, more than its max_visits ({cap}); raise it with @{action.name}.step(max_visits=…) "
            f"if the loop is meant to run longer"
        )
        forward(session, lane, action, status.FAILED, error=error, only_from=_PERFORMING)
        return
    session.refresh(action, ["status"])
    if action.status != status.PERFORMING:
        return
    history.record(session, action, "decided", step_id=step.id, go_to=names[target], step=source)
    action.current_step_index = target
    action.store_arguments()
    open_step(session, action, visit=visits + 1)


#: How often an action has run the step at ``index`` so far.
_VISITS = select(func.max(Step.visit)).where(
    Step.action_id == bindparam("action_id"), Step.definition_index == bindparam("index")
)
_PERFORMING = frozenset({status.PERFORMING})
_COMPENSATING = frozenset({status.COMPENSATING})


def finalize(
    session: Session,
    action: Action,
    to: str,
    *,
    cause: str = history.WORKER,
    by: str | None = None,
    error: BaseException | None = None,
    note: str | None = None,
    unperformed_steps: bool = True,
    only_from: frozenset[str] | None = None,
    result: Any = None,
    closing: Lane | None = None,
) -> bool:
    """Complete ``action`` with status ``to`` once: run its after-callbacks, leave its lane,
    close the steps whose body never ran (``unperformed_steps=False``: it has none), grant
    its achievement, and conclude the parent steps waiting on it. ``result`` (stored form)
    becomes its result when given. False when the action was already completed, or its
    stored status is not in ``only_from`` (nothing changes then). ``closing`` (PostgreSQL,
    the action being its lane's current one) removes the lane in the same statement as
    the status when no other member is left, and says whether it did."""
    if to not in status.COMPLETIONS:
        raise InvalidTransition(f"actions complete as one of {sorted(status.COMPLETIONS)}, not {to!r}")
    values: dict[str, Any] = {"completed_at": clock.now()}
    if result is not None:
        values["result"] = result
    joined: dict[str, Any] = {}
    if closing is not None:
        joined = {"joined": closing.statement, "joined_parameters": closing.parameters(action.id)}
        joined["joined_rows"] = closing.rows
    if not write_status(session, action, to, only_from, **joined, **values):
        return False
    if error is not None:
        action.record_error(error)
    run_callbacks(session, action, to)
    action.store_arguments()
    data: dict[str, Any] = {"status": to}
    if note:
        data["note"] = note
    if error is not None:
        data.update(error_data(error))
    history.record(session, action, "completed", cause=cause, by=by, **data)
    if unperformed_steps:
        close_unperformed(session, action.id)
    if action.succeeded_including_callbacks and action.checksum:
        achievement.grant(session, action.checksum_key, action.checksum, action.id)
    conclude_waiters(session, action)
    return True


def forward(
    session: Session,
    lane: Performance | None,
    completing: Action,
    to: str,
    *,
    cause: str = history.WORKER,
    by: str | None = None,
    note: str | None = None,
    error: BaseException | None = None,
    unperformed_steps: bool = True,
    only_from: frozenset[str] | None = None,
    result: Any = None,
    step_written: tuple[int, dict[str, Any]] | None = None,
) -> None:
    """Complete ``completing`` and move its lane on: the caller holds the lane's lock (and
    has read the action's status under it, or passes the statuses it may complete from as
    ``only_from``). A step that concludes its action leaves no step whose body never ran
    (``unperformed_steps=False``). An action whose completed steps registered compensations
    compensates first (engine/compensating.py), keeping its lane until it ends."""
    if completing.compensations_count and to in compensating.UNDONE_ON and not compensating.holds(completing):
        if unperformed_steps:
            close_unperformed(session, completing.id)
        if compensating.begin(
            session, completing, to, cause=cause, by=by, note=note, error=error, only_from=only_from
        ):
            return
    current = lane is not None and completing.id == lane.action_id
    closing = Lane(lane) if current and lane is not None and on_postgres(session) else None
    if step_written is not None:  # the caller checked that this completion folds (ends_here)
        assert closing is not None and not completing.compensations_count
        closing.step_id, closing.step_written = step_written
    completed = finalize(
        session,
        completing,
        to,
        cause=cause,
        by=by,
        note=note,
        error=error,
        unperformed_steps=unperformed_steps,
        only_from=only_from,
        result=result,
        closing=closing,
    )
    if not completed:
        return  # completed meanwhile: whoever did moved the lane on
    if lane is None:
        return  # not in a lane (it should be): completed all the same rather than stranded
    if not current:
        return  # a queued action left the lane; the current one keeps it
    if closing is not None:
        if closing.closed:
            session.expunge(lane)
            return
    elif performance.close_if_empty(session, lane, completing.id):
        return
    pass_on(session, lane, completing)


def pass_on(session: Session, lane: Performance, completing: Action) -> None:
    """``completing`` left ``lane``, which has other members: the oldest becomes current,
    and performs if it was waiting."""
    upcoming = performance.upcoming(session, lane.concurrency_key, completing.id)
    set_current(lane, upcoming)
    session.flush()
    if upcoming.status == status.PENDING:
        perform(session, upcoming)


def resume_step(session: Session, action: Action) -> None:
    """A reopened action performs again: open its current step, or run it if its body
    has not run, or move on if it already succeeded; a step still waiting on children
    keeps waiting."""
    step = session.scalars(
        select(Step)
        .where(Step.action_id == action.id, Step.definition_index == action.current_step_index)
        .order_by(Step.visit.desc())
        .limit(1)
    ).one_or_none()
    if step is None:
        open_step(session, action)
    elif step.status == status.STEP_CANCELLED:
        step.status, step.completed_at = status.STEP_PERFORMING, None
        history.record(session, action, "step_resumed", step_id=step.id)
        broker.ready_after_commit(session, step.id)
    elif step.status == status.STEP_PERFORMING and step.performed_at is None:
        broker.ready_after_commit(session, step.id)
    elif step.status != status.STEP_PERFORMING:
        accomplished(session, action, step)


def complete_step(session: Session, step: Step, action: Action | None = None) -> None:
    """A step whose children all concluded (or whose body failed) completes, and its
    action moves on."""
    if action is None:  # read first: the step's changes below stay unwritten until needed
        action = session.get(Action, step.action_id, populate_existing=True)
        assert action is not None
    step.completed_at = clock.now()
    if step.status != status.STEP_FAILED:
        step.status = status.STEP_FAILED if step.unsuccessful_actions_count else status.STEP_SUCCEEDED
    history.record(session, action, "step_concluded", step_id=step.id, status=step.status)
    if ends_here(session, action, step):
        with session.no_autoflush:  # the step's changes may ride in the completion
            lane = performance.lock(session, action.concurrency_key)
        if lane is not None and lane.action_id == action.id:
            written = step_changes(step)
            mark_written(step, written)
            session.flush()  # what else the session changed goes first, as before
            _succeed(session, lane, action, step, step_written=(step.id, written))
            return
    session.flush()
    accomplished(session, action, step)


def conclude(session: Session, step_id: int, succeeded: bool, count: int = 1) -> None:
    """``count`` children (or waits) of the step concluded; complete it when none is left."""
    step = decrement(session, step_id, count, 0 if succeeded else count)
    if step.pending_actions_count == 0 and step.completed_at is None:
        complete_step(session, step)


def conclude_waiters(session: Session, action: Action) -> None:
    """Tell every step waiting on ``action`` that it concluded, each exactly once."""
    succeeded = action.succeeded_including_callbacks
    if session.connection().dialect.name == "postgresql":  # one statement (engine/concluding.py)
        for step in concluding.conclude_waiters(session, action.id, succeeded, clock.now()):
            if step.pending_actions_count == 0 and step.completed_at is None:
                complete_step(session, step)
        return
    for step_id, count in concluding.concluded_waiters(session, action.id, succeeded, clock.now()):
        conclude(session, step_id, succeeded, count)
