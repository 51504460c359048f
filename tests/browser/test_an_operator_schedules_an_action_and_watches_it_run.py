"""An operator opens the Schedules page from the navigation, creates a schedule that runs
every second from the form, watches its runs appear (the list polls itself) with their
actions' statuses, pauses it, opens an action it started (which names the schedule and its
tick, linked), edits the schedule from its own page, and deletes it; the browser reports no
Content-Security-Policy violation throughout. The studio is the embedded default, whose
clock thread fires the ticks.

Not a spec case: issue 11, "Studio" (a Schedules page that lists, pauses, resumes, triggers
and creates schedules).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tests.browser.support import playwright_api
from tests.browser.test_people_and_the_content_security_policy import violations

if TYPE_CHECKING:
    from playwright.sync_api import Page

expect = playwright_api().expect


def test_an_operator_schedules_an_action_and_watches_it_run(page: Page) -> None:
    seen = violations(page)
    page.goto("/")
    page.get_by_role("link", name="Schedules").click()
    expect(page.get_by_role("heading", name="Schedules", level=1)).to_be_visible()

    # When the operator creates a schedule that runs every second
    form = page.locator("#create-schedule form")
    form.get_by_label("Name").fill("browser-tick")
    form.get_by_label("or every").fill("1")
    form.get_by_label("Actor type").select_option("Forecast")
    form.get_by_label("Actor id").fill("1")
    form.get_by_label("Action").fill("query_warehouse")
    form.get_by_label("Arguments").fill('["2025-W11"]')
    form.get_by_label("While the previous run goes").select_option("allow")
    form.get_by_role("button", name="Create schedule").click()
    expect(page.locator("#flash")).to_contain_text("Created schedule browser-tick: Every second")

    # Then its runs appear as they fire, linked to their actions, which succeed
    row = page.locator('tr[data-schedule="browser-tick"]')
    expect(row.locator(".status-succeeded").first).to_be_visible(timeout=20_000)
    expect(row.get_by_role("link", name="action #").first).to_be_visible()

    # When the operator pauses it, it says so and offers Resume
    row.get_by_role("button", name="Pause").click()
    expect(page.locator("#flash")).to_contain_text("Paused browser-tick")
    expect(row.get_by_role("button", name="Resume")).to_be_visible()
    expect(row).to_contain_text("paused: no tick until resumed")

    # The action a tick started names the schedule, linked to its page
    row.get_by_role("link", name="action #").first.click()
    expect(page.locator(".started-by")).to_contain_text("Started by schedule browser-tick, tick")
    page.locator(".started-by").get_by_role("link", name="browser-tick").click()
    expect(page.get_by_role("heading", name="Schedule browser-tick", level=1)).to_be_visible()

    # On its page the operator edits it: every hour instead of every second
    edit = page.locator("#edit-schedule form")
    expect(edit.get_by_label("or every")).to_have_value("1")
    edit.get_by_label("or every").fill("3600")
    edit.get_by_label("Why").fill("calmer")
    edit.get_by_role("button", name="Save changes").click()
    expect(page.locator("#flash")).to_contain_text("Edited browser-tick (every seconds): Every hour")
    page.get_by_role("link", name="All schedules").click()
    row = page.locator('tr[data-schedule="browser-tick"]')
    expect(row).to_contain_text("every 3600 s")

    # And deleting it (after the confirmation) removes it from the list
    page.once("dialog", lambda dialog: dialog.accept())
    row.get_by_role("button", name="Delete").click()
    expect(page.locator("#flash")).to_contain_text("Deleted browser-tick")
    expect(row).to_have_count(0)
    assert seen == []
