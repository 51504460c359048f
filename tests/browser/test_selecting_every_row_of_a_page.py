"""The actions list's "select all" box in a real browser: the keyboard ticks every row of the
page, one row cleared makes it mixed, and "Retry selected…" retries exactly the rows that
page listed.

Not a spec case: issue 12's "Act on what you select". The studio runs as ``stepwise serve``
with tests/browser/workflows.py's seeded data: the forecasts "fjord", "glacier" and
"harbour" failed on WarehouseBusy, an error only they raised, so its list is their three
failing leaves. In the studio's process the warehouse answers: a retry succeeds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tests.browser.support import Studio, playwright_api, status_badge

if TYPE_CHECKING:
    from playwright.sync_api import Page

expect = playwright_api().expect

#: Retried trees run on the studio's in-process worker (the warehouse answers in 2 s).
LIVE_MS = 20_000
ERROR = "tests.browser.workflows.WarehouseBusy"


def test_select_all_ticks_the_page_and_retry_selected_retries_those_rows(page: Page, studio: Studio) -> None:
    leaves, roots = studio.seeded["busy_leaves"], studio.seeded["busy_roots"]
    left_alone = studio.seeded["failed"]
    # Given the list of the actions that raised WarehouseBusy: the three failing leaves
    page.goto(f"/actions/?status=failed&error={ERROR}")
    ids = page.locator("table.actions-table tbody tr").evaluate_all("rows => rows.map(r => r.dataset.id)")
    listed = [int(i) for i in ids]
    assert sorted(listed) == sorted(leaves)
    rows = [page.get_by_label(f"Select action {leaf}") for leaf in listed]
    select_all = page.get_by_role("checkbox", name="Select all 3 actions on this page")
    expect(select_all).to_be_visible()

    # When the operator ticks "select all" from the keyboard
    select_all.focus()
    page.keyboard.press("Space")

    # Then every row of the page is ticked, and the selection is counted aloud
    for row in rows:
        expect(row).to_be_checked()
    count = page.locator("[data-selection-count]")
    expect(count).to_have_text("3 of 3 on this page selected")
    expect(count).to_have_attribute("aria-live", "polite")

    # When one row is cleared, the box is mixed; ticked again, it ticks them all again
    rows[0].uncheck()
    assert select_all.evaluate("box => box.indeterminate && !box.checked") is True
    expect(count).to_have_text("2 of 3 on this page selected")
    select_all.focus()
    page.keyboard.press("Space")
    assert select_all.evaluate("box => box.checked && !box.indeterminate") is True
    for row in rows:
        expect(row).to_be_checked()

    # And cleared, it clears them all
    page.keyboard.press("Space")
    for row in rows:
        expect(row).not_to_be_checked()
    expect(count).to_have_text("")

    # When the operator selects all once more and retries the selected ones
    page.keyboard.press("Space")
    page.get_by_role("button", name="Retry selected…").click()
    confirm = page.locator("#bulk-confirm")
    expect(confirm).to_contain_text("Retry the 3 selected actions?")
    expect(confirm.locator("[data-eligible]")).to_have_attribute("data-eligible", "3")
    confirm.get_by_label("Why").fill("the warehouse is quiet again")
    confirm.get_by_role("button", name="Retry 3 actions").click()

    # Then the progress finishes, and its selection is exactly the rows the page listed
    progress = page.locator(".bulk-progress")
    expect(progress).to_have_attribute("data-finished", "true", timeout=LIVE_MS)
    expect(progress).to_contain_text("3 of 3")
    href = progress.locator('a[href*="ids="]').first.get_attribute("href") or ""
    assert sorted(int(i) for i in href.split("ids=", 1)[1].split(",")) == sorted(listed)

    # And the three trees run again and succeed; a failure of another page stays failed
    for root in roots:
        page.goto(f"/actions/{root}")
        expect(status_badge(page)).to_have_text("succeeded", timeout=LIVE_MS)
    page.goto(f"/actions/{left_alone}")
    expect(status_badge(page)).to_have_text("failed")
