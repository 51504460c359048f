"""The signals tests' scenario: a deployment that waits for signals (any-of or all-of,
with a deadline) and records what came, how it is started and drained, and what its inbox
holds. Used by the test_signals_*, test_waits_* and test_approvals_* files.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import testing
from engine.models import Action, Signal
from tests.domain import Car

Seen = list[dict[str, Any]]


def declare_deploy(
    seen: Seen, *, any_of: tuple[str, ...] = ("approved", "rejected"), timeout: float | None = None
) -> None:
    """A deployment that waits for a signal, then records what came."""
    deploy = engine.define(Car, "deploy")

    @deploy.step
    def ask(car: Car, step: engine.StepContext) -> None:
        step.wait_for(*any_of, timeout=timeout)

    @deploy.step
    def go(car: Car, step: engine.StepContext) -> str:
        signal = step.signal
        seen.append(
            {
                "name": signal.name if signal else None,
                "payload": signal.payload if signal else None,
                "by": signal.sent_by if signal else None,
                "deadline": step.deadline_passed,
            }
        )
        return signal.name if signal else "deadline"


def start(session: Session, car: Car, name: str) -> Action:
    invocation = engine.later(car, name)
    session.commit()
    testing.drain()
    session.refresh(invocation)
    action = session.get(Action, invocation.action_id)
    assert action is not None
    return action


def inbox(session: Session, action: Action) -> list[tuple[str, bool]]:
    session.expire_all()
    rows = session.scalars(select(Signal).where(Signal.action_id == action.id).order_by(Signal.id))
    return [(s.name, s.consumed_at is not None) for s in rows]
