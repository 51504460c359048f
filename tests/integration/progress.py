"""How far the trees got: the counts a test waits on, waiting until every tree has ended
and settled, and the diagnosis a test prints when they do not.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

import engine
from engine import status
from engine.models import Action, ActionEvent, Invocation, Performance, Step
from tests.integration.harness import WorkerGroup

#: Invocations requested but not admitted, or children whose parent step was not told they ended.
UNSETTLED = Invocation.settled_at.is_(None) | (
    Invocation.parent_step_id.is_not(None) & Invocation.concluded_at.is_(None)
)


@dataclass
class Progress:
    actions: int
    roots_ended: int
    unfinished: int
    unsettled: int

    def settled(self, roots: int) -> bool:
        """Whether ``roots`` trees ended, with nothing left to perform or to settle."""
        return self.roots_ended >= roots and self.unfinished == 0 and self.unsettled == 0


def progress(session: Session) -> Progress:
    def count(*where: Any) -> int:
        return session.scalar(select(func.count()).select_from(Action).where(*where)) or 0

    return Progress(
        actions=count(),
        roots_ended=count(Action.root.is_(True), Action.status.in_(status.TERMINAL)),
        unfinished=count(Action.status.in_(status.INCOMPLETE)),
        unsettled=session.scalar(select(func.count()).select_from(Invocation).where(UNSETTLED)) or 0,
    )


def wait_until_settled(
    group: WorkerGroup, roots: int, deadline: float, tick: Callable[[Session], None] | None = None
) -> Progress:
    """Until ``roots`` trees ended and settled, calling ``tick`` between looks; fails with a
    diagnosis at ``deadline`` (``time.monotonic()``) or if the workers exit."""
    with engine.new_session() as session:
        while True:
            current = progress(session)
            session.rollback()
            if current.settled(roots):
                return current
            if time.monotonic() > deadline or not group.running():
                pytest.fail(f"not every action ended: {current}\n{diagnosis(session, [group])}")
            if tick is not None:
                tick(session)
            time.sleep(0.2)


# --- diagnosis ------------------------------------------------------------------------


def diagnosis(session: Session, groups: Sequence[WorkerGroup], lines: int = 60) -> str:
    """Why work may have stopped: what is left in the tables, what the broker holds, which
    database sessions wait on which, and the workers' last ``lines`` lines each."""
    logs = "\n".join(f"--- workers ({group.log}):\n{group.tail(lines)}" for group in groups)
    return (
        f"{stuck(session)}\n{groups[0].server.state(sum(g.processes for g in groups))}\n"
        f"database sessions (pid, state, wait, blocked by, age, query):\n{database_sessions(session)}\n"
        f"{logs}"
    )


def stuck(session: Session, limit: int = 12) -> str:
    """What is left unfinished, row by row: each action with its lane, steps and last
    events; each unsettled invocation with its last events."""
    lines = [f"statuses: {dict(Counter(session.scalars(select(Action.status))))}"]
    unfinished = session.scalars(
        select(Action).where(Action.status.in_(status.INCOMPLETE)).order_by(Action.id).limit(limit)
    ).all()
    for action in unfinished:
        lane = session.scalars(
            select(Performance).where(Performance.concurrency_key == action.concurrency_key)
        )
        lines.append(
            f"- {action!r} lane={action.concurrency_key!r} (current: {[p.action_id for p in lane]}) "
            f"step #{action.current_step_index} started={action.started_at} tree={action.tree_id}"
        )
        for step in session.scalars(select(Step).where(Step.action_id == action.id).order_by(Step.id)):
            lines.append(
                f"    {step!r} attempt={step.attempt} performed={step.performed_at} retry_at={step.retry_at} "
                f"completed={step.completed_at}"
            )
        lines += [f"    {event}" for event in events(session, ActionEvent.action_id == action.id)]
    unsettled = session.scalars(
        select(Invocation).where(UNSETTLED).order_by(Invocation.id).limit(limit)
    ).all()
    for invocation in unsettled:
        lines.append(
            f"- {invocation!r} created={invocation.created_at} settled={invocation.settled_at} "
            f"concluded={invocation.concluded_at} parent step={invocation.parent_step_id} "
            f"action={invocation.action_id}"
        )
        lines += [
            f"    {event}" for event in events(session, ActionEvent.invocation_id == invocation.id)
        ] or ["    (no event: neither admitted nor sent again)"]
    return "\n".join(lines)


def events(session: Session, where: Any, last: int = 6) -> list[str]:
    rows = session.scalars(select(ActionEvent).where(where).order_by(ActionEvent.id.desc()).limit(last))
    return [f"{e.at:%H:%M:%S.%f} {e.event} {e.cause} {e.data}" for e in reversed(rows.all())]


def database_sessions(session: Session) -> str:
    rows = session.execute(
        text(
            "SELECT pid, state, wait_event_type || ':' || wait_event, pg_blocking_pids(pid), "
            "now() - xact_start, left(query, 200) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() ORDER BY pid"
        )
    ).all()
    return "\n".join(str(tuple(row)) for row in rows)
