"""Step bodies: running a step's user code once, recording its children or its failure,
retrying it by policy, and sending ready bodies to workers.

A body runs holding its step's lease and nothing else: no lane or action lock that an
outside completion, a timeout or a cancel needs, so user code never sits in a lock cycle.
The lease is a claim committed in the process's shared batch while batches are being
written (engine/claiming.py), else the step's row lock, held by a transaction of its own
that records the outcome too. The outcome is recorded under the lane's lock afterwards. A
redelivered message finds ``performed_at`` set, or the lease taken, and does nothing.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from . import (
    arguments,
    attempt,
    broker,
    clock,
    db,
    history,
    lease,
    registry,
    status,
)
from .action import Action, error_data
from .conclusion import Outcome, conclude_body
from .config import call_user_code
from .errors import ActorNotFound, ArgumentError, DefinitionChanged, UnknownAction
from .step import Step
from .step_context import StepContext

if TYPE_CHECKING:
    from .definition import StepFn


def dispatch_ready(session: Session) -> None:
    """Send the bodies of the steps this session opened to the workers, instead of running
    them here (operator commands run in web requests and CLIs)."""
    queue = broker.ready(session)
    while queue:
        broker.send(broker.PERFORM_STEP, queue.pop(0))


def run_ready(session: Session) -> None:
    """Run the bodies of the steps this session opened, in this session (the caller's:
    ``now()``, outbound completion), each body and its outcome in one transaction, until
    none is left (a body may complete its action and open the next one's step)."""
    queue = broker.ready(session)
    while queue:
        step_id = queue.pop(0)
        try:
            db.retrying(session, partial(perform_and_conclude, session, step_id))
        except Exception as error:
            record_unhandled_alone(step_id, error)
            raise


#: A stored actor reference, ``(actor_type, actor_id)``.
ActorRef = tuple[str, str]


def record_unhandled_alone(step_id: int, error: BaseException) -> None:
    # Unhandled: it propagates to the worker (which may retry the message), but the
    # action row keeps what happened (invariant 8).
    with db.session() as session:
        db.retrying(session, partial(record_unhandled, session, step_id, error))


def record_unhandled(session: Session, step_id: int, error: BaseException) -> None:
    step = session.get(Step, step_id)
    action = session.get(Action, step.action_id) if step is not None else None
    if step is not None and step.performed_at is None:
        step.leased_until = None  # a message retried runs it at once (engine/claiming.py)
    if action is not None:
        action.record_error(error)
        history.record(session, action, "step_errored", step_id=step_id, **error_data(error))


def perform(
    session: Session, step_id: int, guess: ActorRef | None = None, seen: list[ActorRef] | None = None
) -> Outcome | None:
    """Run a step's body once, holding its lease; None when there is nothing to run.
    ``guess`` names the actor it probably belongs to, read with the lease; the actor it
    does belong to is added to ``seen``."""
    step, action, actor = _lease(session, step_id, guess)
    if step is None:
        return None
    if seen is not None:
        seen.append((action.actor_type, action.actor_id))
    if step.performed_at is not None or step.status != status.STEP_PERFORMING:
        return None  # a redelivered message: the body already ran
    if step.leased_until is not None and step.leased_until > clock.now():
        return None  # another worker claimed it and runs it (engine/claiming.py)
    if action.status != status.PERFORMING:
        close_unperformed(step)  # completed meanwhile: cancelled, timed out, from outside
        return None
    if step.retry_at is not None and step.retry_at > clock.now():
        # Early (another host's clock is ahead): come back when the attempt is due.
        broker.enqueue(session, broker.PERFORM_STEP, step.id, delay=step.retry_at - clock.now())
        return None
    if attempt.durable(action, step):
        # Its attempts are durable: engine/durable.py records each start before the body runs.
        broker.enqueue(session, broker.PERFORM_ATTEMPT, step.id)
        return None
    return run_with(session, step, action, actor)


def run_with(session: Session, step: Step, action: Action, actor: Any) -> Outcome:
    """Run the body of ``step``, which is to run, with ``actor`` (its row read afresh in
    this transaction, or None: read it now)."""
    context = StepContext(session, step, action)
    try:
        body, actor = step_function(action, step), action.read_afresh(actor)
    except (ActorNotFound, DefinitionChanged, UnknownAction) as gone:
        # A deploy removed the action or this step, or the actor is gone: no attempt can
        # succeed, so the step fails now rather than on every delivery.
        arguments_json = action.arguments_json
        return Outcome(step.attempt, context, gone, arguments_json, wrote=False, retryable=False)
    return run_body(session, step, action, context, body, actor)


def _lease(session: Session, step_id: int, guess: ActorRef | None) -> tuple[Any, Any, Any]:
    """The step with its lease taken, its action, and its actor if ``guess`` was right
    (read in the same statement); Nones when another holds the lease or the step is gone."""
    mapped = registry.mapped_key(*guess) if guess is not None else None
    row = lease.take(session, step_id, *(mapped or ()))
    if row is None:
        return None, None, None
    step, action, actor = row
    return step, action, actor if (action.actor_type, action.actor_id) == guess else None


def run_body(
    session: Session, step: Step, action: Action, context: StepContext, body: StepFn, actor: Any
) -> Outcome:
    """Call the body with its actor and arguments in ``session``: what it came to."""
    writes = db.writes(session)
    returned, error = call_user_code(body, actor, context, *list(action.arguments))
    result_json, retryable = None, True
    if error is None:
        # A value that cannot be stored fails the same way every time: not retried.
        result_json, error = _stored_result(action, step, context, returned)
        retryable = error is None
    wrote = False
    if error is None:
        try:
            session.flush()  # the body's pending changes count as written
        except SQLAlchemyError as flush_error:
            error = flush_error
        else:
            wrote = db.writes(session) > writes
    return Outcome(
        attempt=step.attempt,
        context=context,
        error=error,
        arguments_json=_arguments_json(action),
        wrote=wrote and error is None,
        after_commit=broker.take_after_commit(session) if error is None else [],
        retryable=retryable,
        result_json=result_json,
    )


def _stored_result(
    action: Action, step: Step, context: StepContext, returned: Any
) -> tuple[Any, BaseException | None]:
    """The JSON form of the step's result (a ``finish`` decision's, else what the body
    returned), or the error saying why it cannot be stored."""
    if context.decision is not None and "finish" in context.decision:
        return context.finish_result, None
    try:
        return arguments.dump(returned), None
    except ArgumentError as error:
        return None, ArgumentError(
            f"step {step.definition_index + 1} of action {action.id} ({action.name}) returned "
            f"{returned!r}, which cannot be its result: {error}"
        )


def step_function(action: Action, step: Step) -> StepFn:
    """The function of the step ``step`` is an execution of; ``DefinitionChanged`` when the
    definition no longer has it."""
    steps = action.definition.all_steps()
    if step.definition_index >= len(steps):
        raise DefinitionChanged(
            f"action {action.id} ({action.name} on {action.actor_type}/{action.actor_id}) is at "
            f"step {step.definition_index + 1}, but its definition now has {len(steps)}: a deploy "
            f"removed the step. Deploy it again and retry the action, or leave it failed"
        )
    return steps[step.definition_index]


def _arguments_json(action: Action) -> list[Any]:
    action.store_arguments()
    return action.arguments_json


def close_unperformed(step: Step) -> None:
    """A step whose action completed before its body ran will never run: close it."""
    if step.completed_at is None:
        step.status, step.completed_at = status.STEP_CANCELLED, clock.now()


def perform_and_conclude(session: Session, step_id: int) -> None:
    """Run a body and record its outcome in one transaction of ``session`` (the caller's).
    A failed attempt's changes are rolled back before its failure is recorded."""
    outcome = perform(session, step_id)
    if outcome is None:
        return
    if outcome.error is not None:
        session.rollback()
    conclude_body(session, step_id, outcome, leased=outcome.error is None)


def resume(session: Session, action_id: int) -> None:
    """Queue the current step of a performing action if its body has not run yet."""

    pending = session.scalars(
        select(Step.id)
        .join(Action, Action.id == Step.action_id)
        .where(
            Step.action_id == action_id,
            Step.definition_index == Action.current_step_index,
            Step.performed_at.is_(None),
            Step.status == status.STEP_PERFORMING,
            Action.status == status.PERFORMING,
        )
    ).first()
    if pending is not None:
        broker.ready(session).append(pending)
