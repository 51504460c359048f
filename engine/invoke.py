"""Invoking an action from code: ``later()`` records it for a worker, ``now()`` performs
it in this process through the same state machine.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session, object_session
from sqlalchemy.orm.exc import UnmappedInstanceError

from . import db
from .action import Action
from .admission import admit_recording_errors
from .invocation import Invocation, invoke
from .step_body import run_ready


def session_for(actor: Any) -> tuple[Session, bool]:
    """The actor's own session, or a new one (then the caller must close it): a service
    object (not a mapped row) has none."""
    try:
        session = object_session(actor)
    except UnmappedInstanceError:
        session = None
    if session is not None:
        return session, False
    return db.session(), True


def later(actor: Any, name: str, *args: Any) -> Invocation:
    """Request ``name`` on ``actor``: recorded in the actor's session (committed with it),
    performed by a worker after commit. A service actor's invocation commits at once."""
    session, own = session_for(actor)
    try:
        invocation = invoke(session, actor, name, args)
        if own:
            session.commit()
        return invocation
    finally:
        if own:
            session.close()


def now(actor: Any, name: str, *args: Any) -> Action:
    """Perform ``name`` on ``actor`` in this process, through the same state machine: admit
    it and run its first steps; children run on workers. Commits the actor's session; an
    actor without one (its session closed) is loaded afresh in a session of the engine's.
    Returns the admitted action, the action it was attached to, or an unsaved action
    whose status says how it ended (skipped invocations are ``succeeded``)."""

    session, own = session_for(actor)
    try:
        # The caller's changes are committed with the invocation, never lost to a retry.
        invocation = db.retrying(
            session, lambda: invoke(session, actor, name, args, enqueue=False), callers_session=not own
        )
        # An actor without a session (a detached row) is only a reference: the engine
        # works on a fresh copy in its own session, as a worker would after ``later()``.
        action = admit_recording_errors(session, invocation.id, None if own else actor)
        run_ready(session)
        assert action is not None
        return action
    finally:
        if own:
            session.close()
