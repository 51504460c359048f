"""Jobs: the Dramatiq functions workers run. Each takes ids, reads the truth from the
database and is a no-op when its message is delivered twice.

Run workers with ``dramatiq engine.jobs yourapp.models`` (import your actor classes), or
name those modules in ``STEPWISE_IMPORTS`` (comma-separated), which this module imports.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from datetime import timedelta
from functools import partial
from typing import Any

import dramatiq
from sqlalchemy import update
from sqlalchemy.orm import Session

from . import (
    admission,
    batch_admission,
    broker,
    bulk_work,
    clock,
    db,
    durable,
    group_commit,
    history,
    inbox,
    registry,
    status,
)
from .action import Action
from .completing import complete_action
from .completion import conclude
from .invocation import Invocation
from .outbound import complete as complete_outbound
from .outbound import complete_action as complete_outbound_action
from .outbound import complete_requested
from .running import ALL_READY, run_steps
from .signal import SIGNAL_WAIT
from .step_body import record_unhandled, resume

broker.setup()

OPTIONS: dict[str, Any] = {"queue_name": broker.QUEUE, "max_retries": 10}


@dramatiq.actor(actor_name=broker.ADMIT, **OPTIONS)
def admit(invocation_id: int) -> None:
    """Admit an invocation to its lane and run the steps that become ready."""

    try:
        admitted, ready, admissions, claims = group_commit.run_claiming(
            _admit_or_resume, (invocation_id,), ALL_READY
        )
    except Exception as error:
        admission.record_unhandled_error(invocation_id, error)
        raise
    action = admitted[0] if admitted else None  # its first step is on its actor
    actor = (action.actor_type, action.actor_id) if action is not None else None
    run_steps(ready, admissions, actor=actor, claims=claims)


def _admit_or_resume(session: Session, units: Sequence[group_commit.Unit[Any]]) -> None:
    """Admit the invocations of a batch's ``admit`` messages together; one settled already
    was redelivered (perhaps after a crash): finish what its first delivery began."""
    batch_admission.admit_all(session, units)
    for unit in units:
        for invocation_id, admitted in zip(unit.item, unit.result or (), strict=True):
            invocation = session.get(Invocation, invocation_id) if admitted is None else None
            if invocation is not None and invocation.action_id is not None:
                with unit.collecting(session):
                    resume(session, invocation.action_id)


@dramatiq.actor(actor_name=broker.PERFORM_STEP, **OPTIONS)
def perform_step(step_id: int, actor: Any = None) -> None:
    """Run a step body that was opened but not run; ``actor``, ``[actor_type, actor_id]``,
    guesses whose step it is (a wrong or malformed guess only costs a query)."""
    guess = (actor[0], actor[1]) if _is_reference(actor) else None
    run_steps([step_id], actor=guess)


def _is_reference(actor: Any) -> bool:
    return isinstance(actor, list) and len(actor) == 2 and all(isinstance(part, str) for part in actor)


@dramatiq.actor(actor_name=broker.PERFORM_ATTEMPT, **OPTIONS)
def perform_attempt(step_id: int) -> None:
    """Run a durable attempt of a step body (heartbeats, attempt timeout, recovery)."""
    try:
        ready, admissions = durable.run(step_id)
    except Exception as error:
        with db.session() as session:  # the action row keeps what happened (invariant 8)
            db.retrying(session, partial(record_unhandled, session, step_id, error))
        raise
    run_steps(ready, admissions)


@dramatiq.actor(actor_name=broker.CHECK_ATTEMPT, **OPTIONS)
def check_attempt(attempt_id: int) -> None:
    """Close a running attempt whose heartbeat or time is up, and retry it by policy."""
    early, ready, admissions = group_commit.run(lambda session: durable.check(session, attempt_id))
    if early is not None:
        broker.send(broker.CHECK_ATTEMPT, attempt_id, delay=early)
    run_steps(ready, admissions)


@dramatiq.actor(actor_name=broker.TIMEOUT, **OPTIONS)
def timeout(action_id: int) -> None:
    """Time out a performing action whose deadline has passed."""

    def work(session: Session) -> timedelta | None:
        action = session.get(Action, action_id, populate_existing=True)
        if action is None or action.status != status.PERFORMING or not action.started_at:
            return None
        deadline = action.started_at + timedelta(seconds=action.timeout_seconds or 0)
        if clock.now() <= deadline:
            return deadline - clock.now() + timedelta(milliseconds=1)
        complete_action(session, action, status.TIMED_OUT, cause=history.TIMEOUT)
        return None

    early, ready, admissions = group_commit.run(work)
    if early is not None:
        broker.send(broker.TIMEOUT, action_id, delay=early)
    run_steps(ready, admissions)


@dramatiq.actor(actor_name=broker.WAIT_OVER, **OPTIONS)
def wait_over(invocation_id: int) -> None:
    """A ``step.wait`` elapsed: conclude it in its step, once."""

    def work(session: Session) -> timedelta | None:
        wait = session.get(Invocation, invocation_id, populate_existing=True)
        if wait is None or wait.concluded_at is not None:
            return None
        if wait.due_at is not None and clock.now() < wait.due_at:
            return wait.due_at - clock.now()
        # A timer's wait is over; a wait for signals reached its deadline without one.
        outcome = "deadline" if wait.name == SIGNAL_WAIT else "waited"
        row = session.execute(
            update(Invocation)
            .where(Invocation.id == invocation_id, Invocation.concluded_at.is_(None))
            .values(concluded_at=clock.now(), settled_at=clock.now(), outcome=outcome, succeeded=True)
            .returning(Invocation.parent_step_id)
            .execution_options(synchronize_session=False)
        ).first()
        if row is not None and row[0] is not None:
            conclude(session, row[0], True)
        return None

    early, ready, admissions = group_commit.run(work)
    if early is not None:
        broker.send(broker.WAIT_OVER, invocation_id, delay=early)
    run_steps(ready, admissions)


@dramatiq.actor(actor_name=broker.MATCH_SIGNALS, **OPTIONS)
def match_signals(action_id: int) -> None:
    """Give an action's pending signals to its open waits (after a send or a new wait
    committed: each may have missed the other in flight)."""
    run_steps(inbox.match_after_commit(action_id))


@dramatiq.actor(actor_name=broker.REMIND, **OPTIONS)
def remind(request_id: int) -> None:
    """An approval is late: start its reminder action, once (not if it was answered)."""
    early, ready, admissions = group_commit.run(lambda session: inbox.remind(session, request_id))
    if early is not None:
        broker.send(broker.REMIND, request_id, delay=early)
    run_steps(ready, admissions)


@dramatiq.actor(actor_name=broker.COMPLETE, **OPTIONS)
def complete(
    actor_type: str,
    actor_id: str,
    name: str,
    to: str = status.SUCCEEDED,
    action_id: int | None = None,
    request_id: int | None = None,
) -> None:
    """Carry out the ``complete_later`` request ``request_id``: complete the outbound action
    it meant (by id when it was known), else the one current for this actor and name.
    (Messages sent before requests were recorded carry no ``request_id``.)"""
    if request_id is not None:
        complete_requested(request_id)
        return
    if action_id is not None:
        complete_outbound_action(action_id, to)
        return
    with db.session() as session:
        actor = registry.load_actor(session, actor_type, actor_id)
        complete_outbound(actor, name, to)


@dramatiq.actor(actor_name=bulk_work.BULK_RUN, **OPTIONS)
def bulk_run(run_id: int) -> None:
    """Work through a bulk command's matching actions from where its run got to."""
    bulk_work.run(run_id)


def import_actor_modules() -> None:
    """Import the modules named in ``STEPWISE_IMPORTS``: a worker started as ``dramatiq
    engine.jobs`` (the Procfile's) then knows the actor classes its messages name."""
    for name in os.environ.get("STEPWISE_IMPORTS", "").split(","):
        if name.strip():
            importlib.import_module(name.strip())


import_actor_modules()

__all__ = [
    "admit",
    "bulk_run",
    "check_attempt",
    "complete",
    "match_signals",
    "perform_attempt",
    "perform_step",
    "timeout",
    "wait_over",
]
