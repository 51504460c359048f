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

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from . import (
    arguments,
    attempt,
    batch_admission,
    batch_conclusion,
    broker,
    claiming,
    clock,
    db,
    group_commit,
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
            _record_unhandled(step_id, error)
            raise


#: A stored actor reference, ``(actor_type, actor_id)``.
ActorRef = tuple[str, str]


def run_steps(
    step_ids: list[int],
    admissions: list[int] | None = None,
    actor: ActorRef | None = None,
    claims: dict[int, claiming.Claim] | None = None,
) -> None:
    """A worker runs the bodies of ready steps, and what they make ready, until nothing is
    left: fewer broker round trips. Each body runs in a session of its own holding its
    step's lease; the outcome of a body that wrote nothing is concluded in this process's
    next shared batch, with that batch's other conclusions (engine/batch_conclusion.py),
    while a body that wrote commits its changes together with its outcome, so they stand
    or fall together. The children a body starts are admitted here, all in one
    transition; the first child's body runs here too and the others' go to the workers,
    so siblings still run in parallel.

    The batch that makes a step ready here claims it for this thread (``claims``, by step
    id: engine/claiming.py), so its body starts with no statement; the keeper extends
    those claims until their bodies ran, and a failure gives up the ones left.

    ``actor`` guesses whose step comes first; each body's actor is the guess for the next
    (children and next steps are mostly on the same actor), and travels with the messages
    of the siblings sent to the workers: a right guess reads the actor with the lease
    (engine/lease.py)."""
    queue = list(step_ids)
    due = list(admissions or ())
    held: dict[int, claiming.Claim] = {}

    def hold(claims: dict[int, claiming.Claim]) -> None:
        claiming.keeper.hold(claims.values())
        held.update(claims)

    hold(claims or {})
    try:
        while queue or due:
            if due:
                steps, claimed = _admit_here(due)
                hold(claimed)
                due = []
                queue.extend(steps[:1])
                for step_id in steps[1:]:
                    broker.send(broker.PERFORM_STEP, step_id, *([list(actor)] if actor else []))
                continue
            step_id = queue.pop(0)
            try:
                ran = _run_step(step_id, actor, held.pop(step_id, None))
            except Exception as error:
                _record_unhandled(step_id, error)
                raise
            finally:
                claiming.keeper.drop([step_id])
            queue.extend(ran.steps)
            due.extend(ran.due)
            actor = ran.actor
            hold(ran.claims)
    finally:
        if held:
            claiming.give_up(held)


def _admit_here(invocation_ids: list[int]) -> tuple[list[int], dict[int, claiming.Claim]]:
    """Admit invocations that became due in this process, in one transition (with the
    other admissions of its batch: engine/batch_admission.py); the steps that became
    ready, and the claim on the first, which this thread runs. If that fails, their
    messages go to the broker instead, where each is retried (and its error recorded)
    alone."""

    try:
        admitting = tuple(invocation_ids)
        _, steps, more, claims = group_commit.run_claiming(batch_admission.admit_all, admitting, 1)
    except Exception:
        for invocation_id in invocation_ids:
            broker.send(broker.ADMIT, invocation_id)
        return [], {}
    for invocation_id in more:  # admissions start no children: only a body does
        broker.send(broker.ADMIT, invocation_id)
    return steps, claims


@dataclass
class Ran:
    """What a body's run came to for its thread: the steps it made ready, the invocations
    it made due, its actor's reference (the guess for the next), and the claims taken for
    this thread on the steps it made ready."""

    steps: list[int]
    due: list[int]
    actor: ActorRef | None
    claims: dict[int, claiming.Claim] = field(default_factory=dict)


def _run_step(step_id: int, guess: ActorRef | None, claim: claiming.Claim | None = None) -> Ran:
    """Run a step's body, claimed for this thread already (``claim``), else claimed in
    this process's next batch when ``claims()``; one that is not claimed runs, if it is to
    run at all, under its row lock. ``guess`` names its actor's probable reference."""
    if claim is None and claims():
        claim = group_commit.run_together(claiming.claim_all, step_id)[0]
        claiming.keeper.hold([claim] if claim is not None else [])
    if claim is None:
        return _run_leased(step_id, guess)
    return _run_claimed(claim)


def claims() -> bool:
    """Whether a worker claims a step it was sent in its process's next batch before
    running its body: while batches are being written, where the claim costs a share of
    one. With none, the step's row lock taken in a transaction of its own, which records
    the outcome too, costs one transaction where a claim and a conclusion would cost two.
    (A step made ready in this process is claimed by the batch that made it ready.)"""
    return not group_commit.shared().idle()


def _run_claimed(claim: claiming.Claim) -> Ran:
    """Run a claimed step's body in a session made from the rows its claim read: with no
    transaction unless the body touches the database. A body that wrote commits its outcome
    with its writes; any other outcome goes to the next batch."""
    step_id, actor = claim.step.id, (claim.action.actor_type, claim.action.actor_id)
    admissions: list[int] = []
    with db.session() as session, broker.admitting_here(session, admissions):
        step, action, row = claim.into(session)

        def in_own_session(session: Session) -> Outcome | None:
            outcome = _run(session, step, action, row)
            if outcome.error is None and outcome.wrote:
                conclude_body(session, step_id, outcome)  # under the step's row lock
                return None
            return outcome

        outcome = _attempt_body(session, in_own_session)
        ready = broker.ready(session)[:]
    return _concluded(step_id, outcome, Ran(ready, admissions, actor))


def _run_leased(step_id: int, guess: ActorRef | None) -> Ran:
    """Run a step's body holding its row lock, if it is to run (``perform``)."""
    seen: list[ActorRef] = []

    def in_own_session(session: Session) -> Outcome | None:
        outcome = perform(session, step_id, guess, seen)
        if outcome is not None and outcome.error is None and (outcome.wrote or group_commit.shared().idle()):
            # A body that wrote commits its outcome with its writes; with no batch being
            # written, a transaction of its own costs no more than joining one.
            conclude_body(session, step_id, outcome, leased=True)
            return None
        return outcome  # to the next batch: rolled back, the lease released

    admissions: list[int] = []
    with db.session() as session, broker.admitting_here(session, admissions):
        outcome = _attempt_body(session, in_own_session)
        ready = broker.ready(session)[:]
    return _concluded(step_id, outcome, Ran(ready, admissions, seen[-1] if seen else guess))


#: Claim every step a transition makes ready (``run_claiming``): this thread runs them all.
ALL_READY = 1_000_000


def _concluded(step_id: int, outcome: Outcome | None, ran: Ran) -> Ran:
    """``ran``, with what concluding the body's ``outcome`` (unless recorded with its
    writes) in this process's next batch made ready and due, and claimed here."""
    if outcome is None:
        return ran
    concluding = (step_id, outcome)
    _, more, due, claimed = group_commit.run_claiming(batch_conclusion.conclude_all, concluding, ALL_READY)
    return Ran([*ran.steps, *more], [*ran.due, *due], ran.actor, claimed)


def _attempt_body(session: Session, work: Callable[[Session], Outcome | None]) -> Outcome | None:
    """Run the body (and, if it wrote, its outcome) and commit; when nothing was written,
    roll back instead (no commit to pay for a read-only body). A deadlock or a lost
    connection before the commit runs the body again, as any retried transaction."""

    def attempt() -> Outcome | None:
        outcome = work(session)
        if outcome is not None:
            session.rollback()
        return outcome

    return db.retrying(session, attempt, lock=False)


def _record_unhandled(step_id: int, error: BaseException) -> None:
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
    return _run(session, step, action, actor)


def _run(session: Session, step: Step, action: Action, actor: Any) -> Outcome:
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
