"""On PostgreSQL an invocation whose lane does not exist founds it in one statement
(engine/founding.py): the lane, the action already performing, its first step and its
settled invocation. When another admission founded that lane after this one looked for it,
the statement writes nothing at all, and the invocation queues in the existing lane as
usual: no second performing action, no stray row."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

import engine
from engine import performance, status, testing
from engine.invocation import Invocation
from engine.step import Step
from tests.domain import Car

pytestmark = pytest.mark.postgresql_only


def does_nothing(car: Car, *args: object) -> None:
    pass


def action_of(session: Session, invocation_id: int) -> engine.Action:
    invocation = session.get(Invocation, invocation_id)
    assert invocation is not None and invocation.action_id is not None
    action = session.get(engine.Action, invocation.action_id)
    assert action is not None
    return action


def count(session: Session, model: Any) -> int:
    return session.scalar(select(func.count()).select_from(model)) or 0


def test_an_admission_that_finds_its_lane_founded_meanwhile_queues_in_it(
    session: Session, car: Car, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an outbound action performing in the lane "booth"
    engine.define(Car, "paint", does_nothing, outbound=True, concurrency_key="booth")
    first = engine.later(car, "paint")
    session.commit()
    testing.drain()

    # When the next admission reads no lane (as when the founder had not yet committed)
    real_lock = performance.lock
    reads: list[str] = []

    def lock_unseen_once(session: Session, key: str) -> Any:
        reads.append(key)
        return None if len(reads) == 1 else real_lock(session, key)

    monkeypatch.setattr(performance, "lock", lock_unseen_once)
    second = engine.later(car, "paint")
    session.commit()
    testing.drain()

    # Then founding the lane wrote nothing, and the invocation queued behind the first
    session.expire_all()
    assert reads == ["booth", "booth"]
    first_action, second_action = (action_of(session, invocation.id) for invocation in (first, second))
    assert first_action.status == status.PERFORMING
    assert second_action.status == status.PENDING
    lanes = session.scalars(select(engine.Performance)).all()
    assert [(lane.concurrency_key, lane.action_id) for lane in lanes] == [("booth", first_action.id)]
    assert count(session, engine.Action) == 2
    # (the founding statement took an id from the sequence, then wrote nothing with it)
    assert second_action.id == first_action.id + 2
    assert count(session, Step) == 1  # the first action's: the queued one has none yet
    settled = session.get(Invocation, second.id)
    assert settled is not None and settled.settled_at is not None
    assert (settled.outcome, settled.action_id) == ("admitted", second_action.id)
