"""Given transitions from several worker threads sharing one batch, when Dramatiq
interrupts the thread that writes it (its time limit: ``TimeLimitExceeded``, raised in
that thread wherever it is), then the batch is rolled back, the interruption goes on in
that thread alone, and the others' transitions are written by a batch led by one of their
own threads: none is told it committed when it did not."""

from __future__ import annotations

from collections.abc import Callable

from dramatiq.middleware.time_limit import TimeLimitExceeded
from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from tests.test_group_commit_isolates_a_failing_transition import HeldBatch, completing, outbound_actions

__all__ = ["outbound_actions"]  # the fixture, used by name


def test_the_others_in_the_batch_of_an_interrupted_leader_commit_in_the_next(
    session: Session, outbound_actions: list[int]
) -> None:
    # Given the interrupted thread queued first (it leads the next batch), then the others
    held = HeldBatch()

    def interrupted(_session: Session) -> None:
        raise TimeLimitExceeded()  # as the timer's exception lands while this thread leads

    held.queue(0, interrupted)
    first, _, second = outbound_actions  # the middle one fails by itself (the fixture)
    for action_id in (first, second):
        held.queue(action_id, completing(action_id))

    # When the held batch commits and the interrupted thread leads the next
    results = held.release()

    # Then its thread alone was interrupted, and the others' transitions committed
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
    held = HeldBatch()
    calls: dict[int, int] = {}
    first, failing, last = outbound_actions

    def counted(action_id: int, interrupted_at: int | None = None) -> Callable[[Session], bool]:
        def work(session: Session) -> bool:
            calls[action_id] = calls.get(action_id, 0) + 1
            if calls[action_id] == interrupted_at:
                raise TimeLimitExceeded()  # the leader's timer fires while it writes this one
            return completing(action_id)(session)

        return work

    for action_id, interrupted_at in ((first, None), (failing, None), (last, 1)):
        held.queue(action_id, counted(action_id, interrupted_at))

    # When the batch is written (its leader is the first's thread)
    results = held.release()

    # Then the leader's thread was interrupted after its own transition committed alone,
    # the failing one failed alone once, and the interrupted one committed in a batch of
    # its own thread's
    assert isinstance(results[first], TimeLimitExceeded)
    assert isinstance(results[failing], RuntimeError)
    assert results[last] is True
    assert calls == {first: 2, failing: 2, last: 2}  # the batch stopped at the failing one
    session.expire_all()
    statuses = dict(session.execute(select(engine.Action.id, engine.Action.status)).all())
    assert statuses == {first: "succeeded", failing: "performing", last: "succeeded"}
