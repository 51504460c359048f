"""Given a lane (a queue (performance)) whose current action has not completed, the lanes
page says why it is not moving, in words: an outbound completion awaited since T, a timeout
due at T, a retry of a step due at T, a step body not run yet since T, the child actions
(and waits) its step waits on, or a deadlock under it with its cycle named.

Not a spec case: the studio is ours (issue 4, "Lanes (performances)"). Each situation is
built with the engine's API under a frozen clock, so the times in the sentences are known.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime, timedelta
from html import unescape

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from app.lanes import queries as queries_lanes
from engine import RetryPolicy, StepContext, testing
from engine.admission import admit_recording_errors
from engine.models import Action, Invocation
from engine.sweeper import GRACE
from tests.domain import Car
from tests.studio.support import StudioClient

T = datetime(2025, 1, 2, 3, 4, 5)
STAMP = "2025-01-02 03:04:05"


@pytest.fixture(autouse=True)
def frozen() -> Iterator[None]:
    testing.freeze(T)
    yield


def order_paint(car: Car, color: str = "red") -> None:
    """The paint shop is asked; it completes the action from outside."""


def honk_once(car: Car, n: int) -> None:
    car.honk()


def text_of(html: str) -> str:
    return unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).replace(" ,", ",").strip())


def reasons_on(html: str, key: str) -> list[str]:
    """The reasons the lanes page gives for the lane ``key``, as plain text."""
    row = re.search(rf'<tr [^>]*data-lane="{re.escape(key)}">(.*?)</tr>', html, re.S)
    assert row is not None, f"no lane {key} on the page"
    return [
        text_of(item) for item in re.findall(r'<li class="reason [^"]*"[^>]*>(.*?)</li>', row.group(1), re.S)
    ]


def sentences(session: Session, key: str) -> list[str]:
    lane = queries_lanes.lane(session, key)
    assert lane is not None
    return [reason.sentence for reason in lane.reasons]


def action_named(session: Session, name: str) -> Action:
    session.expire_all()
    found = session.scalars(select(Action).where(Action.name == name).order_by(Action.id.desc())).first()
    assert found is not None
    return found


def test_an_outbound_action_waits_for_its_completion_since_its_last_step_concluded(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    # Given an outbound paint whose step ran at T, three minutes ago
    engine.define(Car, "paint", order_paint, outbound=True)
    paint = engine.now(car, "paint", "red")
    testing.travel(timedelta(minutes=3))

    # When a viewer opens the lanes page
    page = viewer_client.get("/lanes/?single=1")

    # Then its lane says it waits for an outbound completion since T
    assert page.status_code == 200
    expected = (
        f"waiting for an outbound completion since {STAMP} (a webhook, an operator's approval or "
        "engine.complete completes it)"
    )
    assert sentences(session, f"Car/{car.id}/paint") == [expected]
    assert reasons_on(page.text, f"Car/{car.id}/paint") == [f"{expected} (3m 00s ago)"]
    # And the lane names its current action, linked to the action page
    assert f'href="/actions/{paint.id}"' in page.text


def test_a_lane_with_a_timeout_says_when_it_is_due(session: Session, car: Car) -> None:
    # Given an outbound paint with a five-minute timeout, started at T
    engine.define(Car, "paint", order_paint, outbound=True, timeout=timedelta(minutes=5))
    engine.now(car, "paint", "red")

    # Then its lane gives both reasons: the outbound wait and the timeout due at T + 5 minutes
    reasons = sentences(session, f"Car/{car.id}/paint")
    assert reasons[-1] == "timeout due at 2025-01-02 03:09:05"
    assert reasons[0].startswith(f"waiting for an outbound completion since {STAMP}")

    # And once the deadline has passed without the timeout job, it says the job is late
    testing.travel(timedelta(minutes=6))
    assert sentences(session, f"Car/{car.id}/paint")[-1] == (
        "timeout due at 2025-01-02 03:09:05, passed (its job is late; the sweeper re-sends it after "
        "the grace period)"
    )


def test_a_failed_attempt_waiting_for_its_retry_says_when_the_retry_is_due(
    session: Session, car: Car
) -> None:
    # Given a wash whose only step fails, with three attempts ten seconds apart
    wash = engine.define(
        Car, "wash", retry=RetryPolicy(max_attempts=3, initial_interval=timedelta(seconds=10), jitter=0)
    )

    @wash.step
    def scrub(car: Car, step: StepContext) -> None:
        raise RuntimeError("no water")

    # When its first attempt fails at T
    with testing.handle_exceptions():
        engine.now(car, "wash")

    # Then its lane says the retry of step 1 is due ten seconds later
    assert sentences(session, f"Car/{car.id}/wash") == [
        "retry of step 1 of 1 (scrub) due at 2025-01-02 03:04:15 (attempt 2 of 3)"
    ]


def test_a_step_whose_body_has_not_run_is_queued_then_maybe_lost(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    # Given a worker that admitted a honk and opened its step, then died before running it
    invocation = engine.later(car, "honk")
    session.commit()
    with engine.new_session() as worker:
        admit_recording_errors(worker, invocation.id)
    key = f"Car/{car.id}/honk"

    # Then at first the lane says its step waits for a worker
    assert sentences(session, key) == [
        f"step 1 of 1 body not run yet since {STAMP} (queued for a worker; the sweeper re-sends it if no "
        "worker runs it within the grace period)"
    ]

    # And past the sweeper's grace period, that a worker may have died
    testing.travel(GRACE + timedelta(seconds=1))
    expected = (
        f"step 1 of 1 body not run yet since {STAMP} (a worker may have died; the sweeper re-sends "
        "after the grace period)"
    )
    assert sentences(session, key) == [expected]
    assert reasons_on(viewer_client.get("/lanes/?single=1").text, key) == [f"{expected} (31s ago)"]


def test_a_step_waiting_on_children_names_them_with_links(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    # Given paints keyed by colour, and a red paint already holding the paint/red lane
    engine.define(
        Car, "paint", order_paint, outbound=True, concurrency_key=lambda car, color: f"paint/{color}"
    )
    engine.now(car, "paint", "red")
    trip = engine.define(Car, "trip")

    @trip.step
    def prepare(car: Car, step: StepContext) -> None:
        step.do("paint", "blue")
        step.do("paint", "red")
        step.wait(timedelta(hours=1))

    # When a trip starts, waiting on a blue paint, a red one queued behind the first, and a wait
    engine.now(car, "trip")
    testing.drain()
    blue, red = (
        session.scalars(
            select(Action).where(Action.name == "paint", Action.root_id.is_not(None)).order_by(Action.id)
        )
    ).all()

    # Then the trip's lane names each child with its status, the queued one with its lane
    expected = (
        f"waiting on 2 child actions and 1 wait: paint #{blue.id} (performing), paint #{red.id} (pending in "
        "lane paint/red), a wait until 2025-01-02 04:04:05"
    )
    assert sentences(session, f"Car/{car.id}/trip") == [expected]
    page = viewer_client.get("/lanes/?single=1")
    (shown,) = reasons_on(page.text, f"Car/{car.id}/trip")
    assert shown.startswith(
        f"waiting on 2 child actions and 1 wait: paint #{blue.id} performing, paint #{red.id}"
    )
    assert f'href="/actions/{blue.id}"' in page.text
    assert 'href="/lanes/lane?key=paint/red"' in page.text


def test_many_children_are_capped(session: Session, car: Car) -> None:
    # Given a convoy waiting on eight honks, each in its own lane
    engine.define(Car, "honk", honk_once, outbound=True, concurrency_key=lambda car, n: f"honk/{n}")
    convoy = engine.define(Car, "convoy")

    @convoy.step
    def honk_all(car: Car, step: StepContext) -> None:
        for n in range(8):
            step.do("honk", n)

    engine.now(car, "convoy")
    testing.drain()

    # Then its lane names the first five and counts the others
    (reason,) = queries_lanes.lane(session, f"Car/{car.id}/convoy").reasons  # type: ignore[union-attr]
    assert reason.text == "waiting on 8 child actions:"
    assert len(reason.links) == 5
    assert reason.more == 3
    assert reason.sentence.endswith("and 3 more")


def deadlocking_recycle(*, direct: bool) -> None:
    """recycle holds the maintenance lane; a drive below it (its child, or its grandchild
    through prepare_recycle) wants that lane too. A direct one waits on a paint as well."""
    engine.define(Car, "drive", concurrency_key=lambda car, *args: "Car/maintenance")
    engine.define(Car, "paint", order_paint, outbound=True)
    recycle = engine.define(Car, "recycle", concurrency_key=lambda car: "Car/maintenance")

    @recycle.step
    def prepare(car: Car, step: StepContext) -> None:
        if direct:
            step.do("drive", 1)
            step.do("paint", "grey")
        else:
            step.do("prepare_recycle")

    prepare_recycle = engine.define(Car, "prepare_recycle")

    @prepare_recycle.step
    def drive_away(car: Car, step: StepContext) -> None:
        step.do("drive", 1)


def test_a_handled_deadlock_under_the_current_action_is_named_with_its_cycle(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    # Given recycle holding the maintenance lane, whose child drive wants the same lane,
    # and whose other child, a paint, keeps its step open
    deadlocking_recycle(direct=True)
    with testing.handle_exceptions(engine.Deadlock):
        recycle = engine.now(car, "recycle")
        testing.drain()
    drive = session.scalars(select(Invocation).where(Invocation.name == "drive")).one()
    paint = action_named(session, "paint")
    assert drive.outcome == "deadlocked"

    # Then the lane names the deadlock first, with its cycle, then the child it still waits on
    assert sentences(session, "Car/maintenance") == [
        f"deadlock: drive on Car/{car.id}, started by action #{recycle.id} (recycle), would wait for lane "
        f"Car/maintenance, which its ancestor action #{recycle.id} (recycle) holds (it ended deadlocked, so "
        f"the step waiting on it fails); the cycle: recycle #{recycle.id} (performing) → drive (invocation "
        f"#{drive.id}, wants lane Car/maintenance) → recycle #{recycle.id} (performing)",
        f"waiting on 1 child action: paint #{paint.id} (performing)",
    ]
    page = viewer_client.get("/lanes/?single=1")
    assert reasons_on(page.text, "Car/maintenance")[0].startswith(f"deadlock: drive on Car/{car.id}")
    assert "lane-deadlocked" in page.text


def test_an_unhandled_deadlock_below_a_child_stalls_the_lane_and_is_named(session: Session, car: Car) -> None:
    # Given recycle holding the maintenance lane, whose grandchild drive wants the same lane,
    # with Deadlock not handled: the drive's admission raises and it is never admitted
    deadlocking_recycle(direct=False)
    recycle = engine.now(car, "recycle")
    with pytest.raises(engine.Deadlock):
        testing.drain()
    prepare = action_named(session, "prepare_recycle")
    drive = session.scalars(select(Invocation).where(Invocation.name == "drive")).one()

    # Then the maintenance lane names the deadlock and the whole cycle through prepare_recycle
    (deadlock, waiting) = sentences(session, "Car/maintenance")
    assert deadlock == (
        f"deadlock: drive on Car/{car.id}, started by action #{prepare.id} (prepare_recycle), would wait for "
        f"lane Car/maintenance, which its ancestor action #{recycle.id} (recycle) holds (Deadlock is not "
        f"handled, so it stays unadmitted and its step waits); the cycle: recycle #{recycle.id} "
        f"(performing) → prepare_recycle #{prepare.id} (performing) → drive (invocation #{drive.id}, "
        f"wants lane Car/maintenance) → recycle #{recycle.id} (performing)"
    )
    assert waiting == f"waiting on 1 child action: prepare_recycle #{prepare.id} (performing)"
    # And prepare_recycle's own lane shows the drive that could not be admitted
    (_, child) = sentences(session, f"Car/{car.id}/prepare_recycle")
    assert child.startswith("waiting on 1 child action: drive (not admitted: Deadlock: drive on Car/")


def test_a_deadlock_before_an_operators_retry_no_longer_counts(session: Session, car: Car) -> None:
    # Given the handled deadlock, then recycle retried by an operator (it performs anew)
    deadlocking_recycle(direct=True)
    with testing.handle_exceptions(engine.Deadlock):
        recycle = engine.now(car, "recycle")
        testing.drain()
        engine.complete(car, "paint")
        testing.drain()
    assert action_named(session, "recycle").status == "failed"
    testing.travel(timedelta(minutes=1))
    assert engine.commands.retry(recycle.id, by="olga")

    # Then the old deadlock is not given as a reason of the reopened action
    lane = queries_lanes.lane(session, "Car/maintenance")
    assert lane is not None
    assert all(reason.kind != "deadlock" for reason in lane.reasons)
