"""The actions list's time range in a real browser (issue 12, "time-range presets"): a preset
is one click, swaps the list and puts ``window=1h`` in the address bar; typing a custom
from/to chooses Custom and drops the preset; in local time the custom fields show and take
the browser's time zone while the URL keeps UTC. No error reaches the console.

Not a spec case. The studio runs as ``stepwise serve`` with tests/browser/workflows.py's
seeded data, created moments before the tests: the last 15 minutes hold all of it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from tests.browser.conftest import new_page
from tests.browser.support import Studio, playwright_api

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

expect = playwright_api().expect


def rows(page: Page) -> int:
    return page.locator("#actions-list tbody tr").count()


def test_a_preset_is_one_click_and_a_custom_time_replaces_it(page: Page, studio: Studio) -> None:
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.goto("/actions/")
    everything = rows(page)
    assert everything > 0
    expect(page.locator("#window-any")).to_be_checked()

    # When the operator picks "15 min"
    page.locator("label[for=window-15m]").click()

    # Then the list is swapped for the last 15 minutes and the address bar says so
    expect(page).to_have_url(re.compile(r"[?&]window=15m"))
    expect(page.locator("#window-15m")).to_be_checked()
    expect(page.locator(".window-note")).to_contain_text("Created in the last 15 minutes")
    assert rows(page) == everything  # the seeded actions are minutes old

    # And "1 h" after it replaces it
    page.locator("label[for=window-1h]").click()
    expect(page).to_have_url(re.compile(r"[?&]window=1h"))

    # When she types a custom "from" instead
    page.locator("#filter-created-after").fill("2000-01-01T00:00:00")  # input, then change

    # Then Custom is chosen, the preset is gone from the URL, and the from/to applies
    expect(page).to_have_url(re.compile(r"created_after=2000-01-01T00(%3A|:)00"))
    expect(page.locator("#window-custom")).to_be_checked()
    assert "window=" not in page.url
    expect(page.locator(".window-note")).to_have_count(0)

    # And choosing a preset again clears the custom fields
    page.locator("label[for=window-24h]").click()
    expect(page).to_have_url(re.compile(r"[?&]window=24h"))
    expect(page.locator("#filter-created-after")).to_have_value("")
    assert "created_after" not in page.url

    # And the bookmark opens as it was left
    page.goto(page.url)
    expect(page.locator("#window-24h")).to_be_checked()
    assert not errors, errors


@pytest.fixture
def kolkata_page(browser: Browser, studio: Studio, signed_in: dict[str, Any]) -> Iterator[Page]:
    """A signed-in tab whose time zone is India's (UTC+5:30, no summer time)."""
    yield from new_page(browser, studio, storage_state=signed_in, timezone_id="Asia/Kolkata")


def test_in_local_time_the_custom_fields_show_and_take_local_time(kolkata_page: Page) -> None:
    page = kolkata_page
    # Given the list from 10:00 UTC, in local time
    page.goto("/actions/?created_after=2026-01-01T10:00")
    expect(page.locator("#filter-created-after")).to_have_value("2026-01-01T10:00")
    page.keyboard.press("t")
    expect(page.get_by_role("button", name="Local time")).to_be_visible()

    # Then the field shows 15:30, the same moment in Kolkata, and the labels name the zone
    # (Chromium writes a time's zero seconds or not)
    field = page.locator("#filter-created-after")
    expect(field).to_have_value(re.compile(r"^2026-01-01T15:30(:00)?$"))
    expect(page.locator("label[for=filter-created-after]")).to_have_text("Created from (UTC+05:30)")
    expect(page.locator(".page-head")).to_contain_text("times in UTC+05:30")

    # When she sets it to 17:30 local and the list is filtered
    field.fill("2026-01-01T17:30:00")

    # Then the URL (and the server) has 12:00 UTC, and the field still shows local time
    expect(page).to_have_url(re.compile(r"created_after=2026-01-01T12(%3A|:)00"))
    expect(field).to_have_value(re.compile(r"^2026-01-01T17:30(:00)?$"))

    # And back in UTC (Escape leaves the field), the field shows UTC again
    page.keyboard.press("Escape")
    page.keyboard.press("t")
    expect(field).to_have_value(re.compile(r"^2026-01-01T12:00(:00)?$"))
    expect(page.locator("label[for=filter-created-after]")).to_have_text("Created from (UTC)")
