"""Durable attempts as the action page and the API show them: each attempt of a step that
declares heartbeat_timeout, attempt_timeout or recover (its heartbeat, progress, checkpoint
and how it ended), and the failure that sent a recovery step on its way.

Read only for an action whose definition declares durable attempts (no query otherwise: the
page of any other action keeps its bounded query count).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from engine import registry
from engine.errors import EngineError
from engine.models import Action, Attempt
from engine.recovery import Failure, failure_of


def declares_attempts(action: Action) -> bool:
    """Whether the action's definition (as deployed here) has durable attempts."""
    try:
        definition = registry.find(registry.actor_class(action.actor_type), action.name)
    except EngineError:
        return False
    return definition is not None and bool(definition.attempt_options or definition.default_attempt_options)


def of_action(session: Session, action: Action) -> list[Attempt]:
    """The action's attempts, oldest first (none read when it declares none)."""
    if not declares_attempts(action):
        return []
    return list(session.scalars(select(Attempt).where(Attempt.action_id == action.id).order_by(Attempt.id)))


def panel(session: Session, action: Action, steps: Sequence[Any]) -> dict[str, Any]:
    """The action page's context: ``durable_attempts`` (step id -> attempts) and
    ``recovered_from`` (recovery step id -> the failed step's id and its failure)."""
    by_step: dict[int, list[Attempt]] = {}
    for found in of_action(session, action):
        by_step.setdefault(found.step_id, []).append(found)
    recovered_from: dict[int, tuple[int, Failure]] = {}
    pending: list[tuple[int, str, Failure]] = []  # failed step id, its recovery step, the failure
    names = _names(action)
    for step in sorted(steps, key=lambda s: s.id):
        # A compensation's step (index -1) is no step of the definition: no name.
        name = names[step.definition_index] if 0 <= step.definition_index < len(names) else None
        for entry in pending:
            if entry[1] == name:
                recovered_from[step.id] = (entry[0], entry[2])
                pending.remove(entry)
                break
        failure = failure_of(step.decision)
        if failure is not None:
            pending.append((step.id, str((step.decision or {}).get("go_to")), failure))
    return {"durable_attempts": by_step, "recovered_from": recovered_from}


def _names(action: Action) -> list[str]:
    try:
        definition = registry.find(registry.actor_class(action.actor_type), action.name)
    except EngineError:
        return []
    return definition.step_names() if definition is not None else []


def attempt_json(found: Attempt) -> dict[str, Any]:
    def iso(value: Any) -> str | None:
        return value.isoformat() if value is not None else None

    return {
        "id": found.id,
        "step_id": found.step_id,
        "attempt": found.attempt,
        "outcome": found.outcome,
        "worker": found.worker,
        "enqueued_at": iso(found.enqueued_at),
        "started_at": iso(found.started_at),
        "heartbeat_at": iso(found.heartbeat_at),
        "progress": found.progress,
        "checkpoint": found.checkpoint,
        "lost_at": iso(found.lost_at),
        "deadline_at": iso(found.deadline_at),
        "ended_at": iso(found.ended_at),
        "error_class": found.error_class,
        "error_message": found.error_message,
    }
