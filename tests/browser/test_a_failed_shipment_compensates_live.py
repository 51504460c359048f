"""Compensation in a real browser (issue 11's acceptance): an operator rejects a parcel's
carrier in a second tab; the parcel's page, left open, shows its compensations running
and finishing beside the steps they undo, by its own polling (no reload), and the parcel
ending failed.

The studio runs as ``stepwise serve`` with tests/browser/compensation_workflows.py's
seeded parcel; each compensation takes a few seconds there, so a poll sees it running.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tests.browser.support import Studio, playwright_api, require_built

if TYPE_CHECKING:
    from playwright.sync_api import Page

expect = playwright_api().expect

#: Two compensations of a few seconds each, seen through polls every 3 s.
LIVE_MS = 40_000


def test_a_rejected_shipment_shows_its_compensations_running_and_finishing(
    page: Page, studio: Studio
) -> None:
    parcel, carrier = studio.seeded["parcel"], studio.seeded["parcel_carrier"]
    # Given the page of a parcel waiting for its carrier, its undos registered
    response = page.goto(f"/actions/{parcel}")
    require_built(page, response, "the action page")
    expect(page.locator(".state-badge")).to_have_text("performing")
    tree = page.get_by_role("region", name="Tree")
    undos = tree.locator("[data-compensation-status]")
    expect(undos).to_have_count(2)
    expect(tree.locator('[data-compensation-status="registered"]')).to_have_count(2)
    page.evaluate("window.stillTheSamePage = true")

    # When an operator rejects the carrier, in a second tab
    tab = page.context.new_page()
    tab.goto(f"/actions/{carrier}")
    reject = tab.locator("form").filter(has=tab.get_by_role("button", name="Reject", exact=True))
    reject.get_by_label("Note").fill("the carrier lost it")
    reject.get_by_role("button", name="Reject", exact=True).click()
    expect(tab.locator(".state-badge")).to_have_text("failed", timeout=LIVE_MS)
    tab.close()

    # Then the parcel's page, left open, shows it compensating: the unpacking runs first
    # (the last completed step's), beside the step it undoes
    page.bring_to_front()
    expect(page.locator(".state-badge")).to_have_text("compensating", timeout=LIVE_MS)
    running = tree.locator('[data-compensation-status="running"]')
    expect(running).to_have_count(1, timeout=LIVE_MS)
    expect(running).to_contain_text("unpack")
    expect(tree).to_contain_text("compensation 1: undoes step pack")

    # And then the refund runs and both finish, and the parcel ends failed
    expect(tree.locator('[data-compensation-status="running"]')).to_contain_text("refund", timeout=LIVE_MS)
    expect(tree.locator('[data-compensation-status="succeeded"]')).to_have_count(2, timeout=LIVE_MS)
    expect(page.locator(".state-badge")).to_have_text("failed", timeout=LIVE_MS)
    expect(tree).to_contain_text("compensation 2: undoes step send")
    assert page.evaluate("window.stillTheSamePage") is True, "the action page was reloaded"

    # And its history says it was compensated
    expect(page.locator("main")).to_contain_text("compensated")
