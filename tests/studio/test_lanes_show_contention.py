"""Given lanes with queues of different lengths and ages, the lanes page shows contention
first: the longest queues first, or the oldest waits first, or by key; filtered by key
prefix, by a least queue length and by a least wait; lanes whose only action is their current
one are hidden unless asked for. Keys break only after a "/", never inside a word; the page
says "Lanes" and explains "performance" once.

Not a spec case: issue 12, item 6 ("Lanes that show contention").
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pytest
from sqlalchemy.orm import Session

import engine
from app.lanes import queries as queries_lanes
from engine import testing
from tests.domain import Car
from tests.studio.support import HTMX, StudioClient

T = datetime(2025, 3, 1, 9, 0, 0)


def lanes_on(html: str) -> list[str]:
    return re.findall(r'data-lane="([^"]+)"', html)


def queued_on(html: str) -> list[int]:
    return [int(n) for n in re.findall(r'data-queued="(\d+)"', html)]


def cars(session: Session, count: int) -> list[Car]:
    """Cars of their own: a newer invocation by the same actor supersedes its queued one."""
    made = [Car() for _ in range(count)]
    session.add_all(made)
    session.commit()
    return made


@pytest.fixture
def contention(session: Session) -> None:
    """Lanes whose current action has one queued behind it: paint/blue's since T - 1h (the
    oldest wait), paint/red's since T, wash/quick's since T + 1m; paint/green has a single
    action. (A newer queued action supersedes an older one: a queue holds one.)"""
    engine.define(
        Car,
        "paint",
        lambda car, color: None,
        outbound=True,
        concurrency_key=lambda car, color: f"paint/{color}",
    )
    engine.define(
        Car, "wash", lambda car, kind: None, outbound=True, concurrency_key=lambda car, kind: f"wash/{kind}"
    )
    testing.freeze(T - timedelta(hours=1, minutes=5))
    engine.now(cars(session, 1)[0], "paint", "red")
    engine.now(cars(session, 1)[0], "wash", "quick")
    testing.freeze(T - timedelta(hours=1))
    for car in cars(session, 2):
        engine.now(car, "paint", "blue")
    testing.freeze(T)
    engine.now(cars(session, 1)[0], "paint", "red")
    engine.now(cars(session, 1)[0], "paint", "green")
    testing.freeze(T + timedelta(minutes=1))
    engine.now(cars(session, 1)[0], "wash", "quick")
    testing.freeze(T + timedelta(minutes=30))


def test_by_default_lanes_with_a_queue_come_first_longest_waits_first_and_single_action_lanes_are_hidden(
    viewer_client: StudioClient, contention: None
) -> None:
    page = viewer_client.get("/lanes/")

    assert page.status_code == 200
    assert lanes_on(page.text) == ["paint/blue", "paint/red", "wash/quick"]
    assert queued_on(page.text) == [1, 1, 1]
    assert 'name="single" value="1">' in page.text  # offered, not checked


def test_lanes_with_a_single_action_are_shown_when_asked_for_after_the_queued_ones(
    viewer_client: StudioClient, contention: None
) -> None:
    page = viewer_client.get("/lanes/?single=1")

    assert lanes_on(page.text) == ["paint/blue", "paint/red", "wash/quick", "paint/green"]
    assert queued_on(page.text) == [1, 1, 1, 0]


def test_the_oldest_wait_first_and_how_long_it_is(viewer_client: StudioClient, contention: None) -> None:
    page = viewer_client.get("/lanes/?sort=wait")

    assert lanes_on(page.text) == ["paint/blue", "paint/red", "wash/quick"]
    row = page.text.split('data-lane="paint/blue"', 1)[1].split("</tr>", 1)[0]
    assert 'title="queued 2025-03-01 08:00:00 UTC">1h 30m<' in row


def test_filters_by_least_queue_least_wait_and_key_prefix(
    viewer_client: StudioClient, contention: None
) -> None:
    assert lanes_on(viewer_client.get("/lanes/?min_queue=1").text) == [
        "paint/blue",
        "paint/red",
        "wash/quick",
    ]
    assert lanes_on(viewer_client.get("/lanes/?waited=1h").text) == ["paint/blue"]
    assert lanes_on(viewer_client.get("/lanes/?q=paint/").text) == ["paint/blue", "paint/red"]
    assert lanes_on(viewer_client.get("/lanes/?q=paint/&sort=key&single=1").text) == [
        "paint/blue",
        "paint/green",
        "paint/red",
    ]
    empty = viewer_client.get("/lanes/?min_queue=2")
    assert lanes_on(empty.text) == []
    assert "No lane has that long a queue or wait." in empty.text


def test_sorted_pages_follow_each_other_and_the_polled_fragment_keeps_the_view(
    viewer_client: StudioClient, contention: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(queries_lanes, "PAGE", 2)

    first = viewer_client.get("/lanes/?sort=wait")
    assert lanes_on(first.text) == ["paint/blue", "paint/red"]
    assert 'rel="next" href="/lanes/?sort=wait&amp;page=1"' in first.text
    second = viewer_client.get("/lanes/?sort=wait&page=1", headers=HTMX)
    assert lanes_on(second.text) == ["wash/quick"]
    assert 'hx-get="/lanes/?sort=wait&amp;page=1"' in second.text


def test_no_lane_has_a_queue_says_so_and_offers_the_single_action_lanes(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    engine.define(
        Car,
        "paint",
        lambda car, color: None,
        outbound=True,
        concurrency_key=lambda car, color: f"paint/{color}",
    )
    engine.now(car, "paint", "red")

    page = viewer_client.get("/lanes/")

    assert lanes_on(page.text) == []
    assert "No lane has a queue: no action waits behind a performing one." in page.text
    assert 'href="/lanes/?single=1">Show the lanes with a single action</a>' in page.text


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("sort=size", "sort=&#39;size&#39; is not one of queue, wait, key."),
        ("waited=2h", "waited=&#39;2h&#39; is not one of 1m, 10m, 1h, 1d."),
        ("min_queue=-1", "min_queue=&#39;-1&#39; is not a whole number from 0 to 1,000,000."),
        ("min_queue=lots", "min_queue=&#39;lots&#39; is not a whole number"),
        ("page=99999999999999999999", "page=&#39;99999999999999999999&#39; is not a whole number"),
        ("single=maybe", "single=&#39;maybe&#39; is not a yes or no"),
        ("q=" + "x" * 300, "q is longer than any lane key (255 characters)."),
    ],
)
def test_a_bad_parameter_is_a_400_that_names_it(
    viewer_client: StudioClient, query: str, message: str
) -> None:
    answer = viewer_client.get(f"/lanes/?{query}")
    assert answer.status_code == 400
    assert message in answer.text


def test_keys_break_only_after_a_slash_and_the_word_is_lanes(
    viewer_client: StudioClient, contention: None
) -> None:
    page = viewer_client.get("/lanes/").text

    assert '<a class="mono lane-key" href="/lanes/lane?key=paint/red">paint/<wbr>red</a>' in page
    assert "<title>Lanes · Stepwise</title>" in page
    assert "<h1>Lanes</h1>" in page
    assert page.count("performance") == 1  # explained once, in the intro
    assert "Queues" not in page
    lane = viewer_client.get("/lanes/lane?key=paint/red").text
    assert "All lanes" in lane and "queues (performances)" not in lane.lower()
