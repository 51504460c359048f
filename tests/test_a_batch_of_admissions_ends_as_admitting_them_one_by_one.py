"""A group-commit batch admits all its invocations together (engine/batch_admission.py):
on PostgreSQL with one lock of their rows, one of their lanes and one founding of the new
lanes, whatever their number. Each ends as it would admitted alone, one by one in id
order: the first of a new key performs and the next queues behind it, one whose lane
exists queues in it, one whose work is achieved is skipped, a redelivered one is left
alone; and what each registers for after the commit is its own transition's."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import batch_admission, db, status, testing
from engine.group_commit import Unit
from engine.invocation import Invocation
from tests.domain import Car
from tests.statement_helpers import statements


def does_nothing(car: Car, *args: object) -> None:
    pass


def units_of(*items: Sequence[int]) -> list[Unit[Any]]:
    return [Unit(None, batch_admission.admit_all, tuple(item)) for item in items]


def admit_together(units: list[Unit[Any]]) -> None:
    with db.transaction() as session:
        batch_admission.admit_all(session, units)


def test_a_batch_of_admissions_ends_as_admitting_them_one_by_one(session: Session, car: Car) -> None:
    # Given a washing bay 1 busy with an outbound wash, and a visit to Paris achieved
    engine.define(Car, "wash", does_nothing, outbound=True, concurrency_key=lambda car, bay: f"bay/{bay}")
    engine.define(Car, "visit", Car.change_location, checksum=lambda car, place: place)
    busy = engine.later(car, "wash", 1)
    engine.later(car, "visit", "Paris")
    session.commit()
    testing.drain()

    # When one batch admits two washes in the new bay 2 (one transition's, as siblings),
    # a wash in bay 1, the visit to Paris again, a wash in the new bay 3, and the busy
    # wash's invocation again (a redelivered message)
    first_in_2, second_in_2 = engine.later(car, "wash", 2), engine.later(car, "wash", 2)
    in_1, paris, in_3 = (
        engine.later(car, "wash", 1),
        engine.later(car, "visit", "Paris"),
        engine.later(car, "wash", 3),
    )
    session.commit()
    units = units_of((first_in_2.id, second_in_2.id), (in_1.id,), (paris.id,), (in_3.id,), (busy.id,))
    admit_together(units)

    # Then each ended as alone: the first of bay 2 performs and the second queues behind
    # it, the wash in bay 1 queues, Paris is skipped, bay 3 performs, the redelivery is None
    twins, washed_1, visited, washed_3, again = (unit.result for unit in units)
    assert [action.status for action in twins] == [status.PERFORMING, status.PENDING]
    assert twins[0].concurrency_key == twins[1].concurrency_key == "bay/2"
    assert twins[0].id < twins[1].id
    assert [washed_1[0].status, washed_1[0].concurrency_key] == [status.PENDING, "bay/1"]
    assert visited[0].status == status.SUCCEEDED and visited[0].id is None
    assert [washed_3[0].status, washed_3[0].concurrency_key] == [status.PERFORMING, "bay/3"]
    assert again == [None]
    session.expire_all()
    lanes = {lane.concurrency_key: lane.action_id for lane in session.scalars(select(engine.Performance))}
    busy_action = session.get(Invocation, busy.id).action_id  # type: ignore[union-attr]
    assert lanes == {"bay/1": busy_action, "bay/2": twins[0].id, "bay/3": washed_3[0].id}
    settled = {i.id: i.outcome for i in session.scalars(select(Invocation).where(Invocation.id > busy.id))}
    assert (
        settled[first_in_2.id]
        == settled[second_in_2.id]
        == settled[in_1.id]
        == settled[in_3.id]
        == "admitted"
    )
    assert settled[paris.id] == "skipped"

    # And each transition's share of what follows the commit is its own: the performing
    # actions' first steps are ready in their own transitions only
    ready = [sorted(callbacks_ready(unit)) for unit in units]
    assert [len(steps) for steps in ready] == [1, 0, 0, 1, 0]


def callbacks_ready(unit: Unit[Any]) -> list[int]:
    for callback in unit.after_commit:
        callback()
    return unit.ready


@pytest.mark.postgresql_only
def test_a_batch_of_admissions_takes_as_many_statements_for_six_as_for_one(
    session: Session, car: Car
) -> None:
    # Given washes invoked in six new bays, and one more in a seventh
    engine.define(Car, "wash", does_nothing, concurrency_key=lambda car, bay: f"bay/{bay}")
    six = [engine.later(car, "wash", bay) for bay in range(1, 7)]
    one = engine.later(car, "wash", 7)
    session.commit()

    # When the six are admitted in one batch, and the seventh in a batch of its own
    with statements() as for_six:
        admit_together(units_of(*((invocation.id,) for invocation in six)))
    with statements() as for_one:
        admit_together(units_of((one.id,)))

    # Then both took the same statements: lock, actors, lanes, founding (2), history
    assert len(for_six) == len(for_one) == 6, (for_six, for_one)
    session.expire_all()
    performing = session.scalars(select(engine.Action).where(engine.Action.status == status.PERFORMING)).all()
    assert len(performing) == 7
