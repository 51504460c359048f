"""Given commands recorded minutes, hours and days ago, the audit takes the actions list's
time-range presets (``window=1h``: the entries recorded since then, relative to now), shown
as the chosen one and kept by the command and user filters and by its pages; a bad value is
a 400 naming the field.

Not a spec case: the studio is ours (issue 12, "Fast navigation: time-range presets").
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from sqlalchemy.orm import Session

from app.audit import queries as queries_audit
from engine import audit, testing
from tests.studio.support import StudioClient


def listed(html: str) -> list[int]:
    return [int(n) for n in re.findall(r'<tr id="audit-(\d+)"', html)]


@pytest.fixture
def entries(session: Session) -> dict[str, int]:
    """Forgotten achievements, recorded 3 days, 3 hours and 5 minutes ago (by olga, then
    ben, then olga)."""
    testing.freeze()
    made = {}
    ages = (
        ("3d", "olga", timedelta(days=3) - timedelta(hours=3)),
        ("3h", "ben", timedelta(hours=3) - timedelta(minutes=5)),
        ("5m", "olga", timedelta(minutes=5)),
    )
    for key, by, gap in ages:
        entry = audit.record(session, "forget", f"achievement:Car/1/{key}", cause="operator", by=by)
        session.commit()
        made[key] = entry.id
        testing.travel(gap)
    return made


def test_a_preset_lists_what_was_recorded_since_then(
    viewer_client: StudioClient, entries: dict[str, int]
) -> None:
    every = viewer_client.get("/audit/")
    day = viewer_client.get("/audit/?window=24h")
    quarter = viewer_client.get("/audit/?window=15m")

    assert listed(every.text) == [entries["5m"], entries["3h"], entries["3d"]]
    assert listed(day.text) == [entries["5m"], entries["3h"]]
    assert listed(quarter.text) == [entries["5m"]]
    assert '<a href="/audit/?window=24h" aria-current="true">24 h</a>' in day.text
    # With the user filter, and the form keeps the preset
    olga = viewer_client.get("/audit/?by=olga&window=24h")
    assert listed(olga.text) == [entries["5m"]]
    assert '<input type="hidden" name="window" value="24h">' in olga.text
    assert (
        "No command by ben has been recorded in the last 15 minutes."
        in viewer_client.get("/audit/?by=ben&window=15m").text
    )


def test_the_pages_of_a_preset_keep_it(
    viewer_client: StudioClient, entries: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(queries_audit, "PAGE", 1)

    first = viewer_client.get("/audit/?window=24h")

    older = re.search(r'rel="next" href="([^"]+)"', first.text)
    assert older is not None and "window=24h" in older.group(1)
    second = viewer_client.get(older.group(1).replace("&amp;", "&"))
    assert listed(second.text) == [entries["3h"]]
    assert 'rel="next"' not in second.text  # the entry of 3 days ago is outside the window


def test_a_bad_preset_is_a_400_naming_the_field(viewer_client: StudioClient) -> None:
    answer = viewer_client.get("/audit/?window=yesterday")

    assert answer.status_code == 400
    assert "window: Unknown time range" in answer.text.replace("&#39;", "'")
