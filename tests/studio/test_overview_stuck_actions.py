"""Given performing actions, the overview lists those that look stuck, most overdue first,
each linked to its page and its lane, with why in words:

- performing past its deadline (its timeout has not fired);
- outbound and waiting for its completion for longer than 30 minutes (configurable);
- performing for more than 3 times the median duration of its name's last successful runs
  (and at least a minute).

The list is part of "Needs attention" (no second panel says it again): it polls with it
while the tab is visible and is reused for 15 s between ticks.

Not a spec case: the studio is ours (issue 4, "Overview": actions that look stuck).
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from flask import Flask
from sqlalchemy.orm import Session

import engine
from app.overview import queries as queries_overview
from engine import StepContext, testing
from tests.domain import Car
from tests.studio.support import HTMX, StudioClient


def order_paint(car: Car, *colors: str) -> None:
    """The paint shop is asked; it completes the action from outside."""


def stuck_on(html: str) -> list[tuple[int, str]]:
    return [(int(i), kind) for i, kind in re.findall(r'data-action="(\d+)" data-kind="(\w+)"', html)]


def words(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(autouse=True)
def frozen() -> None:
    testing.freeze()


def define_wash() -> None:
    """A wash soaks for 10 seconds (a step that waits), then it is done."""
    wash = engine.define(Car, "wash")

    @wash.step
    def soak(car: Car, step: StepContext) -> None:
        step.wait(timedelta(seconds=10))


def washes_that_took_ten_seconds(car: Car, n: int = 3) -> None:
    for _ in range(n):
        engine.now(car, "wash")
        testing.travel(timedelta(seconds=10))
        testing.drain()


def test_an_outbound_action_waiting_long_for_its_completion_looks_stuck(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    engine.define(Car, "paint", order_paint, outbound=True)
    old = engine.now(car, "paint", "red")
    testing.travel(timedelta(minutes=20))
    other = Car()
    session.add(other)
    session.commit()
    engine.now(other, "paint", "blue")

    testing.travel(timedelta(minutes=11))
    page = viewer_client.get("/")

    # Then only the one waiting 31 minutes is listed, linked, with why
    assert stuck_on(page.text) == [(old.id, "outbound")]
    row = re.search(
        rf'<tr class="stuck-outbound" data-action="{old.id}" data-kind="outbound">(.*?)</tr>', page.text, re.S
    )
    assert row is not None
    assert f'<a href="/actions/{old.id}">#{old.id} paint</a>' in row.group(1)
    assert f'href="/actions/?concurrency_key={old.concurrency_key}"' in row.group(1)
    assert "31m 00s" in row.group(1)
    assert "Waiting for its outbound completion for more than 30m 00s." in row.group(1)
    assert 'data-stuck="1"' in page.text


def test_the_outbound_threshold_is_configurable(
    app: Flask, viewer_client: StudioClient, session: Session, car: Car
) -> None:
    app.config["STEPWISE_STUCK_OUTBOUND_MINUTES"] = 5
    engine.define(Car, "paint", order_paint, outbound=True)
    action = engine.now(car, "paint", "red")
    testing.travel(timedelta(minutes=6))

    page = viewer_client.get("/")

    assert stuck_on(page.text) == [(action.id, "outbound")]
    assert "outbound and waiting for more than 5m 00s" in words(page.text)


def test_an_action_past_its_deadline_looks_stuck(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    # Given an inspection with a 5-minute timeout whose timeout job has not run
    engine.define(Car, "inspect", order_paint, outbound=True, timeout=timedelta(minutes=5))
    action = engine.now(car, "inspect")
    testing.travel(timedelta(minutes=7))

    page = viewer_client.get("/")

    assert stuck_on(page.text) == [(action.id, "deadline")]
    assert "Past its deadline (2m 00s ago): its timeout has not fired." in page.text


def test_an_action_far_past_the_usual_duration_of_its_name_looks_stuck(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    # Given washes that took 10 seconds, and a wash performing
    define_wash()
    washes_that_took_ten_seconds(car)
    current = engine.now(car, "wash")

    # When it has performed for 50 s (more than 3 x 10 s, but less than the 1-minute floor)
    testing.travel(timedelta(seconds=50))
    assert stuck_on(viewer_client.get("/overview/attention", headers=HTMX).text) == []

    # Then after 2 minutes (12 x its usual time) it looks stuck
    testing.travel(timedelta(seconds=70))
    fragment = viewer_client.get("/overview/attention", headers=HTMX)
    assert stuck_on(fragment.text) == [(current.id, "slow")]
    assert "Usually takes 10s (median of its last successful runs): 12\u00d7 that." in fragment.text


def test_the_most_overdue_comes_first(viewer_client: StudioClient, session: Session, car: Car) -> None:
    define_wash()
    washes_that_took_ten_seconds(car)
    engine.define(Car, "paint", order_paint, outbound=True)
    paint = engine.now(car, "paint", "red")
    testing.travel(timedelta(minutes=25))
    wash = engine.now(car, "wash")
    testing.travel(timedelta(minutes=8))

    page = viewer_client.get("/")

    # The paint job has performed longer (33 minutes) but is 3 minutes past its 30; the wash
    # is 7 minutes past its line (3 x 10 s, at least a minute)
    assert stuck_on(page.text) == [(wash.id, "slow"), (paint.id, "outbound")]


def test_nothing_looks_stuck_when_all_is_well(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    engine.now(car, "drive", 5)

    page = viewer_client.get("/")

    assert stuck_on(page.text) == []
    assert "Nothing looks stuck." in page.text
    assert 'data-stuck="0"' in page.text


def test_the_list_polls_with_needs_attention_and_is_reused_for_fifteen_seconds(
    app: Flask, viewer_client: StudioClient, session: Session, car: Car, monkeypatch: pytest.MonkeyPatch
) -> None:
    app.config["STEPWISE_STUCK_OUTBOUND_MINUTES"] = 0
    reads: list[int] = []
    real = queries_overview.performing_sample

    def performing_sample(*args: Any, **kwargs: Any) -> Any:
        found = real(*args, **kwargs)
        reads.append(len(found))
        return found

    monkeypatch.setattr(queries_overview, "performing_sample", performing_sample)
    first = viewer_client.get("/overview/attention", headers=HTMX)
    assert first.text.lstrip().startswith('<section id="overview-attention"')
    assert 'hx-get="/overview/attention"' in first.text
    assert stuck_on(first.text) == []
    assert reads == [0]

    # When an outbound action starts waiting, the ticks within 15 s reuse the first answer
    engine.define(Car, "paint", order_paint, outbound=True)
    action = engine.now(car, "paint", "red")
    testing.travel(timedelta(seconds=10))
    assert stuck_on(viewer_client.get("/overview/attention", headers=HTMX).text) == []
    assert reads == [0]

    # And after 15 s it is read again
    testing.travel(timedelta(seconds=6))
    assert stuck_on(viewer_client.get("/overview/attention", headers=HTMX).text) == [(action.id, "outbound")]
    assert reads == [0, 1]


def test_the_stuck_list_is_part_of_needs_attention_only(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    """One place says what looks stuck: the overview has no second panel for it."""
    page = viewer_client.get("/")

    assert page.text.count("Nothing looks stuck.") == 1
    assert 'id="overview-stuck"' not in page.text
    assert viewer_client.get("/overview/stuck", headers=HTMX).status_code == 404


def test_the_counts_are_read_on_every_tick(viewer_client: StudioClient, session: Session, car: Car) -> None:
    """The live counts are capped, so cheap: unlike the other panels, they are never stale."""
    engine.define(Car, "paint", order_paint, outbound=True)
    viewer_client.get("/overview/counts", headers=HTMX)
    engine.now(car, "paint", "red")

    fragment = viewer_client.get("/overview/counts", headers=HTMX)

    assert 'data-status="performing" data-count="1"' in fragment.text
    assert 'data-live="waiting" data-count="1"' in fragment.text
