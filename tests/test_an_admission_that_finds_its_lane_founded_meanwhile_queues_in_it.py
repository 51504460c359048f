"""On PostgreSQL an invocation whose lane does not exist founds it in one statement
(engine/founding.py): the lane, the action already performing, its first step and its
settled invocation. When another admission founded that lane after this one looked for it
(and found none), that statement writes nothing at all, and the invocation queues in the
existing lane as usual: no second performing action, no stray row."""

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

    # When two more invocations come for the same lane, and the last one's admission reads
    # no lane at first (as when the lane's founder had not committed yet)
    real_lock = performance.lock
    reads: list[str] = []

    def lock_unseen_once(session: Session, key: str) -> Any:
        reads.append(key)
        return None if len(reads) == 1 else real_lock(session, key)

    second = engine.later(car, "paint")
    session.commit()
    testing.drain()
    monkeypatch.setattr(performance, "lock", lock_unseen_once)
    third = engine.later(car, "paint")
    session.commit()
    testing.drain()

    # Then founding the lane wrote nothing, and the invocation queued behind the first
    session.expire_all()
    assert reads == ["booth", "booth"]
    first_action, second_action, third_action = session.scalars(
        select(engine.Action).order_by(engine.Action.id)
    ).all()
    assert first_action.status == status.PERFORMING
    assert second_action.status == status.SUPERSEDED  # by the third, as any queued work
    assert third_action.status == status.PENDING
    lanes = session.scalars(select(engine.Performance)).all()
    assert [(lane.concurrency_key, lane.action_id) for lane in lanes] == [("booth", first_action.id)]
    assert count(session, engine.Action) == 3
    # (the third's founding statement took an id from the sequence, then wrote nothing)
    assert (second_action.id, third_action.id) == (first_action.id + 1, first_action.id + 3)
    assert count(session, Step) == 1  # the first action's: the queued ones have none
    assert second_action.superseded_by_id == third_action.id
    for invocation in (first, second, third):  # each settled; both later ones wait on the third
        settled = session.get(Invocation, invocation.id)
        assert settled is not None and settled.settled_at is not None and settled.outcome == "admitted"
    assert [session.get(Invocation, i.id).action_id for i in (first, second, third)] == [  # type: ignore[union-attr]
        first_action.id,
        third_action.id,
        third_action.id,
    ]
