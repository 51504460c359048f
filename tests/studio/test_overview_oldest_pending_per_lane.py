"""Given lanes with actions queued behind their current action, the overview lists the
lanes whose oldest pending action has waited longest (at most 20), each with a link to
that action, to the lane's actions and to the action it waits behind. The panel polls
while the tab is visible and is reused for 15 s between ticks.

Not a spec case: the studio is ours (issue 4, "Overview": oldest pending action per lane).
"""

from __future__ import annotations

import re
from datetime import timedelta

from sqlalchemy.orm import Session

import engine
from app.overview import queries as queries_overview
from engine import testing
from tests.domain import Car
from tests.studio.support import HTMX, StudioClient


def order_paint(car: Car, *colors: str) -> None:
    """The paint shop is asked; it completes the action from outside."""


def lanes_on(html: str) -> list[str]:
    return re.findall(r'<tr data-lane="([^"]+)">', html)


def given_two_busy_lanes(session: Session, car: Car) -> dict[str, engine.Action]:
    """The maintenance lane: a paint job waiting for the shop, another queued behind it;
    ten minutes later, the wash lane: the same. (The clock is frozen.)"""
    testing.freeze()
    engine.define(Car, "paint", order_paint, outbound=True, concurrency_key="Car/maintenance")
    engine.define(Car, "wash", order_paint, outbound=True, concurrency_key="Car/wash")
    made = {"red": engine.now(car, "paint", "red"), "blue": engine.now(car, "paint", "blue")}
    testing.travel(timedelta(minutes=10))
    made["soap"] = engine.now(car, "wash", "soap")
    made["foam"] = engine.now(car, "wash", "foam")
    return made


def test_the_lanes_whose_oldest_pending_action_waits_longest_come_first(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    made = given_two_busy_lanes(session, car)
    testing.travel(timedelta(minutes=5))

    page = viewer_client.get("/")

    assert lanes_on(page.text) == ["Car/maintenance", "Car/wash"]
    row = re.search(r'<tr data-lane="Car/maintenance">(.*?)</tr>', page.text, re.S)
    assert row is not None
    cells = row.group(1)
    # The lane links to its actions, the oldest pending action to its page
    assert 'href="/actions/?concurrency_key=Car/maintenance"' in cells
    assert (
        f'<a href="/actions/{made["blue"].id}" data-action="{made["blue"].id}">#{made["blue"].id} paint</a>'
        in cells
    )
    assert "15m 00s ago" in cells
    assert '<td class="num" data-label="Pending">1</td>' in cells
    # And it says what the lane waits for: its current action, performing, outbound
    assert f'href="/actions/{made["red"].id}">#{made["red"].id} paint</a>' in cells
    assert 'class="badge status-performing"' in cells
    assert "since 15m 00s ago, outbound" in cells


def test_at_most_twenty_lanes_are_shown(viewer_client: StudioClient, session: Session, car: Car) -> None:
    # Given 22 lanes, each with an action performing and one queued
    engine.define(
        Car, "paint", order_paint, outbound=True, concurrency_key=lambda car, lane: f"lane/{lane:02d}"
    )
    for lane in range(22):
        engine.now(car, "paint", lane)
        engine.now(car, "paint", lane)

    page = viewer_client.get("/")

    assert lanes_on(page.text) == [f"lane/{n:02d}" for n in range(20)]
    assert "Up to 20 lanes" in page.text


def test_lanes_without_a_queue_are_not_listed(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    engine.define(Car, "paint", order_paint, outbound=True)
    engine.now(car, "paint", "red")

    page = viewer_client.get("/")

    assert lanes_on(page.text) == []
    assert "No action is waiting in a lane." in page.text
    assert 'href="/actions/?status=pending"' in page.text


def test_the_panel_polls_and_is_reused_between_ticks(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    given_two_busy_lanes(session, car)
    first = viewer_client.get("/overview/waiting", headers=HTMX)
    assert first.text.lstrip().startswith('<section id="overview-waiting"')
    assert 'hx-get="/overview/waiting"' in first.text
    assert "hx-trigger=\"every 10s, stepwise:visible\"" in first.text
    assert lanes_on(first.text) == ["Car/maintenance", "Car/wash"]

    # When the maintenance lane moves on, the next tick within 15 s still shows it
    engine.complete(car, "paint", "succeeded")
    testing.drain()
    testing.travel(timedelta(seconds=10))
    assert lanes_on(viewer_client.get("/overview/waiting", headers=HTMX).text) == [
        "Car/maintenance",
        "Car/wash",
    ]
    # And after 15 s the panel is read again
    testing.travel(timedelta(seconds=6))
    assert lanes_on(viewer_client.get("/overview/waiting", headers=HTMX).text) == ["Car/wash"]


def test_the_query_reads_a_bounded_sample_of_the_oldest_pending_actions(session: Session, car: Car) -> None:
    """With a sample smaller than the queue, the lanes found are still the oldest ones, and
    the result says the counts are lower bounds."""
    given_two_busy_lanes(session, car)

    everything, everything_full = queries_overview.oldest_pending_by_lane(session)
    first, first_full = queries_overview.oldest_pending_by_lane(session, scan=1)

    assert [w.concurrency_key for w in everything] == ["Car/maintenance", "Car/wash"]
    assert not everything_full
    assert [w.concurrency_key for w in first] == ["Car/maintenance"]
    assert first_full
