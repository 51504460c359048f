"""Given transitions from several worker threads sharing one batch (one transaction), when
one of them fails, then the batch is rolled back and each transition runs again alone: the
others commit, the failing one fails by itself in its own thread, and nothing of it is
half-applied. An idle process commits a lone transition at once, in a batch of one."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import status, testing
from engine.completing import complete_action
from engine.group_commit import GroupCommit
from tests.domain import Car


@pytest.fixture
def outbound_actions(session: Session) -> list[int]:
    """Three performing outbound ``paint`` actions, one per car; completing the second
    as succeeded raises from its after-callback (unhandled: engine.testing handles none)."""
    paint = engine.define(Car, "paint", outbound=True)

    @paint.step
    def order(car: Car, step: engine.StepContext) -> None:
        pass

    @paint.succeeded
    def invoice(car: Car, action: engine.Action) -> None:
        car.mileage += 100  # a write that must not survive the failure
        if car.location == "broken":
            raise RuntimeError(f"invoicing car {car.id} failed")

    cars = [Car(location="broken" if n == 1 else None) for n in range(3)]
    session.add_all(cars)
    session.commit()
    for car in cars:
        engine.later(car, "paint")
    session.commit()
    testing.drain()
    ids = list(session.scalars(select(engine.Action.id).order_by(engine.Action.id)))
    assert len(ids) == 3
    return ids


def completing(action_id: int) -> Callable[[Session], bool]:
    def work(session: Session) -> bool:
        action = session.get(engine.Action, action_id)
        assert action is not None
        return bool(complete_action(session, action, status.SUCCEEDED))

    return work


class HeldBatch:
    """A group commit whose first batch is held open while transitions queue up behind it,
    each from a thread of its own, in the order they are queued; ``release`` lets the
    batches go and returns each transition's result, or the exception its thread got."""

    def __init__(self) -> None:
        self.group = GroupCommit()
        self.gate = threading.Event()
        self.results: dict[int, Any] = {}
        self.threads: list[threading.Thread] = []
        threading.Thread(target=self._submit, args=(-1, lambda _session: self.gate.wait(timeout=10))).start()
        while not self.group._writing:
            time.sleep(0.001)

    def queue(self, key: int, work: Callable[[Session], Any]) -> None:
        self.threads.append(threading.Thread(target=self._submit, args=(key, work)))
        self.threads[-1].start()
        while len(self.group._waiting) < len(self.threads):
            time.sleep(0.001)

    def release(self) -> dict[int, Any]:
        self.gate.set()
        for thread in self.threads:
            thread.join(timeout=30)
        assert not any(thread.is_alive() for thread in self.threads)
        return self.results

    def _submit(self, key: int, work: Callable[[Session], Any]) -> None:
        try:
            self.results[key] = self.group.run(work)[0]
        except BaseException as error:
            self.results[key] = error


def test_one_failing_transition_leaves_the_rest_of_its_batch_committed(
    session: Session, outbound_actions: list[int]
) -> None:
    # Given three completions queued behind a held batch (the second's callback raises)
    held = HeldBatch()
    for action_id in outbound_actions:
        held.queue(action_id, completing(action_id))

    # When they are written together
    results = held.release()
    group = held.group

    # Then the failing one failed alone, and the others committed

    first, failing, last = outbound_actions
    assert results[first] is True
    assert results[last] is True
    assert isinstance(results[failing], RuntimeError)
    # The gate's batch, then the three together (rolled back), then each alone: the two
    # that succeed commit in batches of their own.
    assert (group.batches, group.transitions) == (3, 3)

    session.expire_all()
    statuses = dict(session.execute(select(engine.Action.id, engine.Action.status)).all())
    assert statuses == {first: "succeeded", failing: "performing", last: "succeeded"}
    mileage = [car.mileage for car in session.scalars(select(Car).order_by(Car.id))]
    assert mileage == [100, 0, 100]


def test_an_idle_process_commits_each_transition_at_once(
    session: Session, outbound_actions: list[int]
) -> None:
    group = GroupCommit()
    first, _, last = outbound_actions
    assert group.run(completing(first))[0] is True
    assert group.run(completing(last))[0] is True
    assert (group.batches, group.transitions) == (2, 2)


def test_transitions_handed_in_while_a_batch_is_written_are_led_by_one_of_their_threads(
    session: Session,
) -> None:
    # Given a batch held open while 24 more transitions arrive, at most 4 to a batch
    group = GroupCommit(max_batch=4)
    holding = threading.Event()

    def hold(session: Session) -> int:
        holding.set()
        time.sleep(0.2)
        return -1

    results: dict[int, Any] = {}

    def submit(n: int, work: Callable[[Session], int]) -> None:
        results[n] = group.run(work)[0]

    first = threading.Thread(target=submit, args=(-1, hold))
    first.start()
    assert holding.wait(5)
    others = [threading.Thread(target=submit, args=(n, lambda session, n=n: n)) for n in range(24)]
    for thread in others:
        thread.start()
    time.sleep(0.05)  # they wait for the held batch

    # When it commits, each following batch is led by one of the waiting threads
    for thread in [first, *others]:
        thread.join(10)

    # Then every thread got its own result, in batches of at most 4
    assert not any(thread.is_alive() for thread in [first, *others])
    assert results == {-1: -1, **{n: n for n in range(24)}}
    assert group.transitions == 25 and group.batches >= 7
