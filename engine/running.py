"""Running steps in a worker: the bodies of ready steps, and what they make ready, until
nothing is left, each under its lease (engine/claiming.py, else its row lock:
``step_body.perform``), the children they start admitted in the same process.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from dramatiq.middleware import Interrupt
from sqlalchemy.orm import Session

from . import batch_admission, batch_conclusion, broker, claiming, db, group_commit, local_runs
from .conclusion import Outcome, conclude_body
from .step_body import ActorRef, perform, record_unhandled_alone, run_with

log = logging.getLogger("stepwise")


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
    transition; the first child's body runs here too, and the others' on this process's
    pool (engine/local_runs.py) or, past what it has threads free for, on the workers, so
    siblings still run in parallel.

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
                _send_steps(steps[1:], actor)
                continue
            step_id = queue.pop(0)
            try:
                ran = _run_step(step_id, actor, held.pop(step_id, None))
            except Exception as error:
                record_unhandled_alone(step_id, error)
                raise
            finally:
                claiming.keeper.drop([step_id])
            queue.extend(ran.steps)
            due.extend(ran.due)
            actor = ran.actor
            hold(ran.claims)
            _send_steps(ran.sends, actor)
            queue.extend(_run_nearby(ran.nearby, held, actor))
    finally:
        if held:
            claiming.give_up(held)


def _send_steps(step_ids: list[int], actor: ActorRef | None) -> None:
    """Send the bodies of ready steps to the workers (siblings of the one run here), with
    the guess of their actor, in one round trip."""
    if step_ids:
        guess = [list(actor)] if actor else []
        broker.send_all(broker.PERFORM_STEP, [(step_id, *guess) for step_id in step_ids])


def _run_nearby(step_ids: list[int], held: dict[int, claiming.Claim], actor: ActorRef | None) -> list[int]:
    """Hand the steps claimed for this process's pool over to it, with their claims, each
    run as a worker runs a step it was sent (``run_steps``); a step left unclaimed goes to
    the workers. Those the pool no longer takes (the worker is shutting down): for this
    thread to run in turn, their claims kept."""
    unclaimed: list[int] = []
    left: list[int] = []
    for step_id in step_ids:
        claim = held.get(step_id)
        if claim is None:
            unclaimed.append(step_id)
        elif local_runs.pool.submit(functools.partial(_run_handed_over, claim, actor)):
            del held[step_id]
        else:
            left.append(step_id)
    _send_steps(unclaimed, actor)
    return left


def _run_handed_over(claim: claiming.Claim, actor: ActorRef | None) -> None:
    """Run a step handed over with its claim, and what it makes ready. If that fails with
    an error the engine did not handle (recorded by ``run_steps``), or Dramatiq's time
    limit interrupts it (engine/local_runs.py), the claim is given up and the step sent to
    the workers, where Dramatiq retries it as it would its message."""
    step_id = claim.step.id
    try:
        run_steps([step_id], None, actor, {step_id: claim})
    except (Exception, Interrupt):
        log.warning("running step %d here failed: sent to the workers", step_id, exc_info=True)
        claiming.give_up({step_id: claim})
        _send_steps([step_id], actor)


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
        broker.send_all(broker.ADMIT, [(invocation_id,) for invocation_id in invocation_ids])
        return [], {}
    if more:  # admissions start no children: only a body does
        broker.send_all(broker.ADMIT, [(invocation_id,) for invocation_id in more])
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
    #: Steps made ready for the workers: the siblings of a child run here.
    sends: list[int] = field(default_factory=list)
    #: Siblings claimed for this process's pool (engine/local_runs.py).
    nearby: list[int] = field(default_factory=list)


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
            outcome = run_with(session, step, action, row)
            if outcome.error is None and outcome.wrote:
                db.plan_by_key(session)  # the body's own statements ran: the engine's follow
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
            db.plan_by_key(session)
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
    writes) in this process's next batch made ready and due, and claimed here; the children
    the body started are admitted in that batch (``batch_admission.admit_due``)."""
    if outcome is None:
        return ran
    concluding = (step_id, outcome)
    unit = group_commit.run_admitting(batch_conclusion.conclude_all, concluding, ALL_READY)
    steps, due = [*ran.steps, *unit.ready], [*ran.due, *unit.admissions]
    return Ran(steps, due, ran.actor, unit.claims, unit.sends, unit.nearby)


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
