"""Given actions created a few minutes, hours and days apart, the actions list offers
time-range presets (the last 15 minutes, hour, 24 hours, 7 days, or a custom from/to). A
preset lives in the URL as ``window=1h``: relative, so a bookmark means "the last hour from
now" whenever it is opened; it is shown as the chosen one, it survives the pages and the
htmx swaps, and a bulk command pins it to the time it meant when it was counted. A bad value,
or a preset together with a custom from/to, is a 400 naming the field ``window``. The
failures grouped by error take the same presets.

Not a spec case: the studio is ours (issue 12, "Fast navigation: time-range presets").
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from sqlalchemy.orm import Session

import engine
from app import time_ranges
from app.actions import queries as queries_actions
from engine import testing
from engine.models import Action
from tests.domain import Car
from tests.studio.support import HTMX, StudioClient, forms


def ids_on(html: str) -> list[int]:
    return [int(n) for n in re.findall(r'<tr data-id="(\d+)"', html)]


def order_paint(car: Car) -> None:
    """The paint shop is asked; it completes the action from outside."""


def chosen(html: str) -> list[str]:
    """The time-range choices the form shows as chosen."""
    return re.findall(r'<input type="radio" id="window-[^"]+" name="window" value="([^"]*)" checked', html)


@pytest.fixture
def ages(session: Session, car: Car) -> dict[str, Action]:
    """Drives created (from now) 8 days, 2 days, 3 hours, 30 minutes and 5 minutes ago."""
    testing.freeze()
    made = {}
    for key, gap in (
        ("8d", timedelta(days=6)),
        ("2d", timedelta(days=2) - timedelta(hours=3)),
        ("3h", timedelta(hours=2, minutes=30)),
        ("30m", timedelta(minutes=25)),
        ("5m", timedelta(minutes=5)),
    ):
        made[key] = engine.now(car, "drive", 1)
        testing.travel(gap)
    return made


@pytest.mark.parametrize(
    ("window", "kept"),
    [
        ("15m", ["5m"]),
        ("1h", ["5m", "30m"]),
        ("24h", ["5m", "30m", "3h"]),
        ("7d", ["5m", "30m", "3h", "2d"]),
    ],
)
def test_each_preset_lists_the_actions_created_since_then(
    viewer_client: StudioClient, ages: dict[str, Action], window: str, kept: list[str]
) -> None:
    page = viewer_client.get(f"/actions/?window={window}")

    assert page.status_code == 200
    assert ids_on(page.text) == [ages[key].id for key in kept]
    # The preset is shown as the chosen one, and the list says what it kept
    assert chosen(page.text) == [window]
    assert f'data-window="{window}"' in page.text
    since = (engine.clock.now() - time_ranges.PRESETS[window].span).strftime("%Y-%m-%d %H:%M:%S")
    assert f">{since}</time>" in page.text


def test_without_a_preset_every_action_is_listed_and_any_time_is_chosen(
    viewer_client: StudioClient, ages: dict[str, Action]
) -> None:
    page = viewer_client.get("/actions/")

    assert sorted(ids_on(page.text)) == sorted(a.id for a in ages.values())
    assert chosen(page.text) == [""]
    for key, label in (
        ("15m", "15 min"),
        ("1h", "1 h"),
        ("24h", "24 h"),
        ("7d", "7 d"),
        ("custom", "Custom"),
    ):
        assert f'<label for="window-{key}">{label}</label>' in page.text


def test_a_bookmarked_preset_means_the_same_span_from_the_moment_it_is_opened(
    viewer_client: StudioClient, ages: dict[str, Action]
) -> None:
    assert ids_on(viewer_client.get("/actions/?window=1h").text) == [ages["5m"].id, ages["30m"].id]

    # When the same URL is opened 40 minutes later
    testing.travel(timedelta(minutes=40))

    # Then it lists the last hour from then: the action of 30 minutes ago is now 70 old
    assert ids_on(viewer_client.get("/actions/?window=1h").text) == [ages["5m"].id]


def test_a_custom_from_to_is_shown_as_custom(viewer_client: StudioClient, ages: dict[str, Action]) -> None:
    # (cut on a whole minute, which a datetime-local value shows without seconds; one run
    # in sixty used to land there by chance)
    cut = (ages["3h"].created_at - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:00")
    until = (ages["30m"].created_at - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%S")

    page = viewer_client.get(f"/actions/?created_after={cut}&created_before={until}")

    assert ids_on(page.text) == [ages["3h"].id]
    assert chosen(page.text) == ["custom"]
    # The form's "custom" choice is implied by the from/to: the shareable URL goes without it
    # (as a datetime-local value: no seconds on a whole minute, and seconds kept otherwise)
    plain = viewer_client.get(f"/actions/?window=custom&created_after={cut}")
    assert plain.status_code == 302
    assert plain.headers["Location"] == f"/actions/?created_after={cut.removesuffix(':00')}"
    with_seconds = cut.removesuffix(":00") + ":07"
    plain = viewer_client.get(f"/actions/?window=custom&created_after={with_seconds}")
    assert plain.headers["Location"] == f"/actions/?created_after={with_seconds}"
    assert viewer_client.get("/actions/?window=&status=").headers["Location"] == "/actions/"


def test_with_htmx_a_preset_swaps_the_list_and_pushes_its_url(
    viewer_client: StudioClient, ages: dict[str, Action]
) -> None:
    fragment = viewer_client.get("/actions/?status=&window=1h&name=drive", headers=HTMX)

    assert fragment.status_code == 200
    assert fragment.text.lstrip().startswith('<section id="actions-list"')
    assert ids_on(fragment.text) == [ages["5m"].id, ages["30m"].id]
    assert fragment.headers["HX-Push-Url"] == "/actions/?name=drive&window=1h"


def test_the_pages_of_a_preset_keep_it(
    viewer_client: StudioClient, ages: dict[str, Action], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(queries_actions, "PAGE_SIZE", 1)

    first = viewer_client.get("/actions/?window=1h")

    assert ids_on(first.text) == [ages["5m"].id]
    older = re.search(r'rel="next" href="([^"]+)"', first.text)
    assert older is not None and "window=1h" in older.group(1)
    assert ids_on(viewer_client.get(older.group(1).replace("&amp;", "&")).text) == [ages["30m"].id]


def test_a_bulk_command_acts_on_the_window_it_counted_not_one_that_moved_on(
    operator_client: StudioClient, ages: dict[str, Action], session: Session, car: Car
) -> None:
    # Given a paint job still performing (completed from outside), started a moment ago
    engine.define(Car, "paint", order_paint, outbound=True)
    engine.now(car, "paint")

    confirm = operator_client.get("/actions/bulk/confirm?verb=cancel&window=1h", headers=HTMX)

    assert confirm.status_code == 200
    assert 'data-eligible="1"' in confirm.text
    (form,) = [f for f in forms(confirm.text) if f.method == "post"]
    assert "window" not in form.inputs
    since = engine.clock.now() - timedelta(hours=1)
    assert form.inputs["created_after"] == since.strftime("%Y-%m-%dT%H:%M:%S")
    assert "the last hour" in confirm.text


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("window=3y", "Unknown time range"),
        ("window=" + "1" * 300, "Unknown time range"),
        ("window=1h&created_after=2026-01-01", "were both given"),
        ("window=15m&created_before=2026-01-01T10:00", "were both given"),
    ],
    ids=["unknown", "long", "with-from", "with-to"],
)
def test_a_bad_time_range_is_a_400_naming_the_field(
    operator_client: StudioClient, ages: dict[str, Action], query: str, message: str
) -> None:
    page = operator_client.get(f"/actions/?{query}")
    fragment = operator_client.get(f"/actions/?{query}", headers=HTMX)
    count = operator_client.get(f"/actions/count?{query}")
    bulk = operator_client.get(f"/actions/bulk/confirm?verb=cancel&{query}")

    for answer in (page, fragment):
        assert answer.status_code == 400
        assert message in answer.text
        assert "<strong>window</strong>" in answer.text
        assert ids_on(answer.text) == []
    assert 'id="error-window"' in page.text
    assert count.status_code == bulk.status_code == 400
    assert "window" in count.text and "window" in bulk.text


def test_the_failures_by_error_take_the_same_presets(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    # Given a breakdown two days ago and two 20 minutes ago
    testing.freeze()
    engine.define(Car, "breakdown")
    with testing.handle_exceptions():
        engine.now(car, "breakdown")
        testing.travel(timedelta(days=2))
        recent = [engine.now(car, "breakdown"), engine.now(car, "breakdown")]
    testing.travel(timedelta(minutes=20))

    every = viewer_client.get("/actions/errors")
    hour = viewer_client.get("/actions/errors?window=1h")
    fifteen = viewer_client.get("/actions/errors?window=15m")

    assert 'data-count="3"' in every.text
    assert 'data-count="2"' in hour.text
    # The preset is shown as the chosen one, and each group's list keeps it
    assert '<a href="/actions/errors?window=1h" aria-current="true">1 h</a>' in hour.text
    assert "window=1h" in re.search(r'<a class="error-class" href="([^"]+)"', hour.text).group(1)  # type: ignore[union-attr]
    listed = viewer_client.get("/actions/?status=failed&error=builtins.RuntimeError&window=1h")
    assert sorted(ids_on(listed.text)) == sorted(a.id for a in recent)
    # A window before the breakdowns groups nothing, and says so
    assert "data-count" not in fifteen.text
    assert "No failed action created in the last 15 minutes raised an error." in fifteen.text
    # A bad preset is a 400 naming the field
    bad = viewer_client.get("/actions/errors?window=forever")
    assert bad.status_code == 400
    assert "window: Unknown time range" in bad.text.replace("&#39;", "'")
