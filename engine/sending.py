"""Sending signals from outside: ``engine.signal``, ``approve`` and ``reject``.

Each runs in the caller's session when the target is a row of one (committed with the
caller's work, retried alone in a SAVEPOINT), else in a transaction of its own, then runs
here the steps the signal made ready, as ``engine.complete`` does.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session, object_session

from . import db, inbox
from .inbox import APPROVED, REJECTED, Target
from .signal import Signal
from .step_body import dispatch_ready, run_ready


def signal(
    target: Target,
    name: str,
    payload: Any = None,
    *,
    by: str | None = None,
    note: str | None = None,
    key: str | None = None,
    session: Session | None = None,
    run_here: bool = True,
) -> Signal:
    """Send signal ``name`` with ``payload`` to ``target``: an action, an action id, or
    ``(actor, action_name)`` for that actor's newest action of that name. It is kept in the
    action's inbox until a step waiting for it consumes it, exactly once. ``key`` makes a
    retried send (a webhook delivery) one signal. ``SignalRefused`` when the action does
    not exist or is finished: nothing is recorded then. The steps it makes ready run here,
    or with ``run_here=False`` (a web request, a CLI) go to the workers."""
    own = False
    if session is None:
        owner = target[0] if isinstance(target, tuple) else target
        session = object_session(owner) if not isinstance(owner, (int, str)) else None
    if session is None:
        session, own = db.session(), True
    caller = session
    try:
        sent: Signal = db.retrying(
            caller,
            lambda: inbox.send(caller, target, name, payload, by=by, note=note, key=key),
            callers_session=not own,
        )
        run_ready(caller) if run_here else dispatch_ready(caller)
        return sent
    finally:
        if own:
            caller.close()


def approve(
    target: Target, payload: Any = None, *, by: str | None = None, note: str | None = None, **how: Any
) -> Signal:
    """Approve what ``target`` waits for (``step.wait_for_approval``): the signal "approved"."""
    return signal(target, APPROVED, payload, by=by, note=note, **how)


def reject(
    target: Target, payload: Any = None, *, by: str | None = None, note: str | None = None, **how: Any
) -> Signal:
    """Reject what ``target`` waits for: the signal "rejected"."""
    return signal(target, REJECTED, payload, by=by, note=note, **how)
