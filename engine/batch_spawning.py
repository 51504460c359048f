"""Spawning as a set: the step bodies of a group-commit batch that started children and
asked for nothing else, recorded together (PostgreSQL: engine/batch_conclusion.py).

A body that succeeded, asked only for children (no waits, signal waits, compensations,
failure or decision) and left its arguments as they were, in a performing step of a
performing action, concludes as ``conclusion.conclude_body`` would conclude it: its
children's invocations inserted and due for admission, its history, and its step
performed and waiting on them. Here the invocations of all such bodies in the batch are
inserted in one flush and their steps written in one more, with the step rows the batch
has locked already (``lease.LOCK_ALL``): no statement of their own per body.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session

from . import broker, clock, status
from .action import Action
from .conclusion import Outcome
from .group_commit import Unit
from .invocation import Invocation
from .step import Step


def spawns_only(outcome: Outcome) -> bool:
    """What the outcome alone tells: whether the body asked for children and nothing else."""
    return outcome.error is None and outcome.context.asked_only_children()


def spawn_all(
    session: Session, ordered: Sequence[Unit[Any]], locked: dict[int, tuple[Step, Action]]
) -> set[int]:
    """Record the bodies of ``ordered`` (units whose item is ``(step_id, outcome)``, in step
    id order) that only started children, their steps ``locked`` in this transaction: the
    ``id()`` of the units concluded. A body delivered twice is recorded once."""
    spawning: list[tuple[Unit[Any], Step, Action, Outcome]] = []
    taken: set[int] = set()
    for unit in ordered:
        step_id, outcome = unit.item
        row = locked.get(step_id)
        if row is not None and step_id not in taken and _spawns_here(*row, outcome):
            taken.add(step_id)
            spawning.append((unit, *row, outcome))
    if not spawning:
        return set()
    requested: list[list[Invocation]] = []
    for _, step, action, outcome in spawning:
        outcome.context.rebind(session, step, action)
        requested.append(outcome.context._requests())
    session.add_all([invocation for invocations in requested for invocation in invocations])
    session.flush()  # one INSERT of every body's children
    now = clock.now()
    for (unit, step, _, outcome), invocations in zip(spawning, requested, strict=True):
        with unit.collecting(session):
            for callback in outcome.after_commit:
                broker.after_commit(session, callback)
            outcome.context._recorded(invocations)
            step.result, step.decision = outcome.result_json, None
            step.performed_at, step.retry_at = now, None
    session.flush()  # one UPDATE of their steps
    return {id(unit) for unit, *_ in spawning}


def _spawns_here(step: Step, action: Action, outcome: Outcome) -> bool:
    return (
        spawns_only(outcome)
        and step.performed_at is None
        and step.attempt == outcome.attempt
        and step.status == status.STEP_PERFORMING
        and action.status == status.PERFORMING
        and outcome.arguments_json == action.arguments_json
    )
