"""The operator's day in a real browser (issue 12's acceptance): approve from the overview's
waiting list; group the failures by error and retry the selected ones.

Not a spec case: issue 12's browser acceptance. The studio runs as ``stepwise serve`` with
tests/browser/workflows.py's seeded data: the refund of customer "hopper" waits for its
approval, and the forecasts "alpine" and "coast" failed on WarehouseOffline (their
failing leaves are the selection). Each test uses only its own seeded actions.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from tests.browser.support import Studio, playwright_api, status_badge

if TYPE_CHECKING:
    from playwright.sync_api import Page

expect = playwright_api().expect

#: Retried trees run on the studio's in-process worker (the warehouse answers in 2 s) and
#: show through htmx polling: how long a test waits for them.
LIVE_MS = 20_000
ERROR = "tests.browser.workflows.WarehouseOffline"


def test_approving_from_the_overviews_waiting_list(page: Page, studio: Studio) -> None:
    approval, refund = studio.seeded["overview_approval"], studio.seeded["overview_refund"]
    # Given the overview: "Needs attention" comes first and lists the waiting approval
    page.goto("/")
    attention = page.get_by_role("region", name="Needs attention")
    expect(attention).to_be_visible()
    waiting = attention.locator(f'li[data-action="{approval}"]')
    expect(waiting).to_contain_text("manager_approval")
    expect(waiting).to_contain_text("waiting")
    page.evaluate("window.stillTheSamePage = true")

    # When the operator approves it there, with a note
    waiting.get_by_label(f"Note for action {approval}").fill("approved from the overview")
    waiting.get_by_role("button", name="Approve", exact=True).click()

    # Then it leaves the list, a message says so, and the page was not reloaded
    expect(page.locator("#flash")).to_contain_text(f"Action {approval} was approved")
    expect(attention.locator(f'li[data-action="{approval}"]')).to_have_count(0)
    assert page.evaluate("window.stillTheSamePage") is True, "the overview was reloaded"

    # And the refund it waited in paid out
    page.goto(f"/actions/{refund}")
    expect(status_badge(page)).to_have_text("succeeded", timeout=LIVE_MS)

    # And the audit says who approved it, and why
    page.goto("/audit/")
    entry = page.locator("main tr").filter(has=page.locator(f'a[href$="/actions/{approval}"]'))
    expect(entry.first).to_contain_text(studio.user)
    expect(entry.first).to_contain_text("approved from the overview")


def test_grouping_failures_by_error_and_retrying_the_selected_ones(page: Page, studio: Studio) -> None:
    leaves, roots = studio.seeded["selected_leaves"], studio.seeded["selected_roots"]
    left_alone = studio.seeded["failed"]
    # Given the failures grouped by error: WarehouseOffline, raised by open_connection
    page.goto("/actions/errors")
    group = page.locator(f'tr[data-error="{ERROR}"]')
    expect(group).to_contain_text("WarehouseOffline")
    expect(group).to_contain_text("open_connection")
    assert int(group.get_attribute("data-count") or 0) >= 3

    # When the operator opens its list, ticks the two forecasts' failing leaves
    group.get_by_role("link", name="WarehouseOffline").click()
    expect(page).to_have_url(re.compile(r"error=tests\.browser\.workflows\.WarehouseOffline"))
    for leaf in leaves:
        page.get_by_label(f"Select action {leaf}").check()
    # and retries the selected ones (failed actions offer no cancel)
    expect(page.get_by_role("button", name="Cancel selected…")).to_have_count(0)
    page.get_by_role("button", name="Retry selected…").click()

    # Then a confirmation counts them
    confirm = page.locator("#bulk-confirm")
    expect(confirm).to_contain_text("Retry the 2 selected actions?")
    expect(confirm.locator("[data-eligible]")).to_have_attribute("data-eligible", "2")
    confirm.get_by_label("Why").fill("the warehouse answers again")
    confirm.get_by_role("button", name="Retry 2 actions").click()

    # And the progress finishes
    progress = page.locator(".bulk-progress")
    expect(progress).to_have_attribute("data-finished", "true", timeout=LIVE_MS)
    expect(progress).to_contain_text("2 of 2")

    # And both trees run again and succeed; the failure not selected stays failed
    for root in roots:
        page.goto(f"/actions/{root}")
        expect(status_badge(page)).to_have_text("succeeded", timeout=LIVE_MS)
    page.goto(f"/actions/{left_alone}")
    expect(status_badge(page)).to_have_text("failed")

    # And one audit entry says who retried the selection, and why
    page.goto("/audit/")
    entry = page.locator("main tr").filter(has_text="the warehouse answers again")
    expect(entry).to_have_count(1)
    expect(entry).to_contain_text(studio.user)


def test_approving_a_waiting_order_with_a_payload_takes_the_branch_it_chose(
    page: Page, studio: Studio
) -> None:
    review = studio.seeded["signal_review"]
    # Given the overview's waiting list: the review waits for an approval, with its deadline
    page.goto("/")
    attention = page.get_by_role("region", name="Needs attention")
    waiting = attention.locator(f'li[data-action="{review}"]')
    expect(waiting).to_contain_text("waits for approved or rejected until")

    # When the operator approves it with a payload choosing express shipping
    waiting.get_by_label(f"JSON payload for action {review}").fill('{"shipping": "express"}')
    waiting.get_by_label(f"Note for action {review}").fill("VIP customer")
    waiting.get_by_role("button", name="Approve", exact=True).click()
    expect(page.locator("#flash")).to_contain_text(f"Action {review} was approved: its step carries on")

    # Then the order took the express branch, and its page says so
    page.goto(f"/actions/{review}")
    expect(status_badge(page)).to_have_text("succeeded", timeout=LIVE_MS)
    steps = page.get_by_role("region", name="Steps")
    expect(steps).to_contain_text("went to express")
    expect(page.get_by_label("Result payload")).to_contain_text("express")
    signals = page.get_by_role("region", name="Signals")
    expect(signals).to_contain_text("approved")
    expect(signals).to_contain_text("VIP customer")
