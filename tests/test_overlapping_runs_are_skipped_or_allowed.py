"""Given a schedule whose previous run is still going (its action pending or performing, or
not yet admitted), when its next tick comes, then ``overlap="skip"`` records the tick as
skipped, visibly, naming the run that is still going, and starts nothing; ``overlap="allow"``
starts a second run. A finished previous run (succeeded or failed) never blocks."""

from __future__ import annotations

from datetime import timedelta

import engine
from engine import schedules, testing
from tests.domain import Car
from tests.schedule_helpers import MONDAY, actions_started, honking, run_clock, ticks


def slow_honking(car: Car, overlap: str) -> None:
    # An outbound action: it performs until completed from outside (a long run)
    honking(car, overlap=overlap)
    engine.define(Car, "honk", lambda car: None, outbound=True)


def test_skip_records_a_skipped_tick_while_the_previous_run_is_going(car: Car) -> None:
    testing.freeze(MONDAY)
    slow_honking(car, overlap="skip")
    testing.travel(timedelta(seconds=30))
    assert run_clock().fired == 1
    [first] = actions_started()
    assert first.status == "performing"

    # When the next tick comes while the first run performs
    testing.travel(timedelta(minutes=1))
    report = run_clock()

    # Then it is skipped, visibly, and nothing more is started
    assert report.skipped == 1 and report.fired == 0
    _fired, skipped = ticks()
    assert skipped.outcome == schedules.SKIPPED
    assert f"action {first.id} of the previous run is still performing" in (skipped.note or "")
    assert skipped.invocation_id is None
    assert len(actions_started()) == 1

    # When the first run finishes, the next tick fires again
    testing.complete_outbound()
    testing.travel(timedelta(minutes=1))
    assert run_clock().fired == 1
    assert len(actions_started()) == 2


def test_skip_counts_a_run_not_yet_admitted_as_going(car: Car) -> None:
    testing.freeze(MONDAY)
    honking(car, overlap="skip")
    testing.travel(timedelta(seconds=30))
    assert schedules.tick().fired == 1  # no worker has admitted it yet
    testing.travel(timedelta(minutes=1))
    assert schedules.tick().skipped == 1
    assert "waiting for admission" in (ticks()[-1].note or "")


def test_allow_starts_a_second_run_beside_the_first(car: Car) -> None:
    testing.freeze(MONDAY)
    slow_honking(car, overlap="allow")
    testing.travel(timedelta(seconds=30))
    run_clock()
    testing.travel(timedelta(minutes=1))

    assert run_clock().fired == 1

    assert [t.outcome for t in ticks()] == ["fired", "fired"]
    # The outbound honks share the actor's lane: the second waits behind the first
    assert len(engine_invocations()) == 2


def test_a_failed_previous_run_does_not_block_the_next(car: Car) -> None:
    testing.freeze(MONDAY)
    honking(car, overlap="skip")
    engine.define(Car, "honk", lambda car: car.breakdown())
    testing.travel(timedelta(seconds=30))
    with engine.handling():
        run_clock()
    assert [a.status for a in actions_started()] == ["failed"]
    testing.travel(timedelta(minutes=1))
    with engine.handling():
        assert run_clock().fired == 1


def engine_invocations() -> list[object]:
    from tests.schedule_helpers import invocations

    return list(invocations())
