"""Statuses of actions and steps, and the transitions between them, as data.

This module is the state diagram: every status writer in the engine checks its
transition against ``TRANSITIONS`` so an action completes at most once (invariant 2).
"""

from __future__ import annotations

PENDING = "pending"
PERFORMING = "performing"
SUCCEEDED = "succeeded"
FAILED = "failed"
CANCELLED = "cancelled"
SUPERSEDED = "superseded"
TIMED_OUT = "timed_out"
DEADLOCKED = "deadlocked"
#: Failed or cancelled, and undoing its completed steps (engine/compensation.py) before it
#: ends so: it keeps its lane, and the steps waiting on it keep waiting.
COMPENSATING = "compensating"

ACTION_STATUSES: tuple[str, ...] = (
    PENDING,
    PERFORMING,
    SUCCEEDED,
    FAILED,
    CANCELLED,
    SUPERSEDED,
    TIMED_OUT,
    DEADLOCKED,
    COMPENSATING,
)

#: Statuses of an action that is still in its lane.
INCOMPLETE: frozenset[str] = frozenset({PENDING, PERFORMING})

#: Statuses an action may be completed with (by its steps, a timeout or from outside).
COMPLETIONS: frozenset[str] = frozenset({SUCCEEDED, FAILED, CANCELLED, TIMED_OUT})

#: Statuses of an action that has not ended: still in its lane, or compensating (which
#: holds its lane until its compensations are done).
UNFINISHED: frozenset[str] = INCOMPLETE | {COMPENSATING}

#: Statuses that end an action. Deadlocked invocations are never persisted as actions,
#: but the status exists so that an unsaved action can report it.
TERMINAL: frozenset[str] = frozenset(set(ACTION_STATUSES) - UNFINISHED)

#: Statuses an operator's retry may reopen (back to pending, in its lane).
RETRYABLE: frozenset[str] = frozenset({FAILED, TIMED_OUT, CANCELLED})

#: from-status -> statuses it may move to. Anything else is refused by the writer.
TRANSITIONS: dict[str, frozenset[str]] = {
    PENDING: frozenset({PERFORMING, SUPERSEDED, COMPENSATING}) | COMPLETIONS,
    PERFORMING: COMPLETIONS | {COMPENSATING},
    # Ends as it was going to (failed, cancelled, timed out) once its compensations ran.
    COMPENSATING: frozenset({FAILED, CANCELLED, TIMED_OUT}),
    FAILED: frozenset({PENDING}),
    TIMED_OUT: frozenset({PENDING}),
    CANCELLED: frozenset({PENDING}),
}

#: Statuses the after-callbacks may be registered for (Stepped: no superseded/deadlocked).
CALLBACK_STATUSES: frozenset[str] = COMPLETIONS
ALL = "all"

# Steps are created performing and end succeeded or failed.
STEP_PERFORMING = PERFORMING
STEP_SUCCEEDED = SUCCEEDED
STEP_FAILED = FAILED
#: A step whose body never ran because its action was completed first (from outside, by
#: a timeout or a cancel). An operator's retry runs it after all.
STEP_CANCELLED = CANCELLED
STEP_STATUSES: tuple[str, ...] = (PENDING, STEP_PERFORMING, STEP_SUCCEEDED, STEP_FAILED, STEP_CANCELLED)


# Compensations (engine/compensation.py): registered by a step body; queued (numbered, last
# completed step's first) when the action compensates; running as a child action; then
# succeeded, or failed (the action waits for an operator to retry or skip it).
COMPENSATION_REGISTERED = "registered"
COMPENSATION_QUEUED = "queued"
COMPENSATION_RUNNING = "running"
COMPENSATION_SUCCEEDED = SUCCEEDED
COMPENSATION_FAILED = FAILED
COMPENSATION_STATUSES: tuple[str, ...] = (
    COMPENSATION_REGISTERED,
    COMPENSATION_QUEUED,
    COMPENSATION_RUNNING,
    COMPENSATION_SUCCEEDED,
    COMPENSATION_FAILED,
)


def sources_of(to: str) -> frozenset[str]:
    """The statuses from which an action may move to ``to``."""
    return frozenset(src for src, targets in TRANSITIONS.items() if to in targets)


def is_terminal(status: str) -> bool:
    return status in TERMINAL
