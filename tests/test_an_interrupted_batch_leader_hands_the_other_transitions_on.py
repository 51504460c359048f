"""Given transitions from several worker threads sharing one batch, when Dramatiq
interrupts the thread that writes it (its time limit: ``TimeLimitExceeded``, raised in
that thread wherever it is), then the batch is rolled back, the interruption goes on in
that thread alone, and the others' transitions are written by a batch led by one of their
own threads: none is told it committed when it did not."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from dramatiq.middleware.time_limit import TimeLimitExceeded
from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine.group_commit import GroupCommit
from tests.test_group_commit_isolates_a_failing_transition import completing, outbound_actions

__all__ = ["outbound_actions"]  # the fixture, used by name


def test_the_others_in_the_batch_of_an_interrupted_leader_commit_in_the_next(
    session: Session, outbound_actions: list[int]
) -> None:
    group = GroupCommit()
    gate = threading.Event()
    results: dict[int, Any] = {}

    def hold(_session: Session) -> None:
        gate.wait(timeout=10)  # the first batch: while it is written, the others queue up

    def interrupted(_session: Session) -> None:
        raise TimeLimitExceeded()  # as the timer's exception lands while this thread leads

    def submit(key: int, work: Callable[[Session], Any]) -> None:
        try:
            results[key] = group.run(work)[0]
        except BaseException as error:
            results[key] = error

    threading.Thread(target=submit, args=(-1, hold)).start()
    while not group._writing:
        time.sleep(0.001)
    # Given the interrupted thread queued first (it leads the next batch), then the others
    threads = [threading.Thread(target=submit, args=(0, interrupted))]
    threads[0].start()
    while len(group._waiting) < 1:
        time.sleep(0.001)
    first, _, second = outbound_actions  # the middle one fails by itself (the fixture)
    for action_id in (first, second):
        threads.append(threading.Thread(target=submit, args=(action_id, completing(action_id))))
        threads[-1].start()
    while len(group._waiting) < 3:
        time.sleep(0.001)

    # When the held batch commits and the interrupted thread leads the next
    gate.set()
    for thread in threads:
        thread.join(timeout=30)

    # Then its thread alone was interrupted, and the others' transitions committed
    assert not any(thread.is_alive() for thread in threads)
    assert isinstance(results[0], TimeLimitExceeded)
    assert results[first] is True and results[second] is True
    session.expire_all()
    statuses = dict(session.execute(select(engine.Action.id, engine.Action.status)).all())
    assert (statuses[first], statuses[second]) == ("succeeded", "succeeded")


def test_transitions_written_alone_before_the_interruption_are_not_written_again(
    session: Session, outbound_actions: list[int]
) -> None:
    # Given a batch that fails (one transition raises), so that its leader writes each
    # transition alone, and is interrupted while it writes the last one
    group = GroupCommit()
    gate = threading.Event()
    results: dict[int, Any] = {}
    calls: dict[int, int] = {}
    first, failing, last = outbound_actions

    def hold(_session: Session) -> None:
        gate.wait(timeout=10)

    def counted(action_id: int, interrupted_at: int | None = None) -> Callable[[Session], bool]:
        def work(session: Session) -> bool:
            calls[action_id] = calls.get(action_id, 0) + 1
            if calls[action_id] == interrupted_at:
                raise TimeLimitExceeded()  # the leader's timer fires while it writes this one
            return completing(action_id)(session)

        return work

    def submit(key: int, work: Callable[[Session], Any]) -> None:
        try:
            results[key] = group.run(work)[0]
        except BaseException as error:
            results[key] = error

    threading.Thread(target=submit, args=(-1, hold)).start()
    while not group._writing:
        time.sleep(0.001)
    threads = []
    for n, (action_id, interrupted_at) in enumerate(((first, None), (failing, None), (last, 1))):
        threads.append(threading.Thread(target=submit, args=(action_id, counted(action_id, interrupted_at))))
        threads[-1].start()
        while len(group._waiting) < n + 1:
            time.sleep(0.001)

    # When the batch is written (its leader is the first's thread)
    gate.set()
    for thread in threads:
        thread.join(timeout=30)

    # Then the leader's thread was interrupted after its own transition committed alone,
    # the failing one failed alone once, and the interrupted one committed in a batch of
    # its own thread's
    assert not any(thread.is_alive() for thread in threads)
    assert isinstance(results[first], TimeLimitExceeded)
    assert isinstance(results[failing], RuntimeError)
    assert results[last] is True
    assert calls == {first: 2, failing: 2, last: 2}  # the batch stopped at the failing one
    session.expire_all()
    statuses = dict(session.execute(select(engine.Action.id, engine.Action.status)).all())
    assert statuses == {first: "succeeded", failing: "performing", last: "succeeded"}
