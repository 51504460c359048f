"""The walk-through an operator does in the studio, in a real browser (issue 4's acceptance):
open the overview; filter to the failed actions; open a failed tree and see the failure
path; retry it and watch it succeed live; approve a waiting outbound action; see the lane
move.

Not a spec case: issue 4's browser acceptance. The studio runs as ``stepwise serve`` with
tests/browser/workflows.py's seeded data (see its docstring for the trees and the lane).
Each test stands alone: it uses its own seeded actions. A page that is not built yet makes
its test xfail (support.require_built), never pass.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from tests.browser.support import Studio, playwright_api, require_built, status_badge

if TYPE_CHECKING:
    from playwright.sync_api import Page

expect = playwright_api().expect

#: The retried tree runs on the studio's in-process worker and shows through htmx polling
#: (every 3 s): this is how long a test waits for it.
LIVE_MS = 20_000

#: Each tree node's own link, whether it is on the failure path, and how it is drawn.
TREE_NODES = """
els => els.map(li => {
  const link = li.querySelector("a");
  const style = getComputedStyle(link);
  return {label: link.textContent.trim(), onPath: li.classList.contains("on-path"),
          weight: style.fontWeight, color: style.color};
})
"""


def link_to(action_id: int) -> str:
    """A CSS selector of the links to action ``action_id``'s page."""
    return f'a[href$="/actions/{action_id}"]'


def test_the_overview_shows_counts_by_status_and_links_to_the_failed_actions(
    page: Page, studio: Studio
) -> None:
    # Given the seeded studio, with failed forecast trees
    # When the operator opens the overview
    page.goto("/")

    # Then it shows the counts by status, the failed ones included
    expect(page.get_by_role("heading", name="Overview", level=1)).to_be_visible()
    failed = page.locator('a[data-status="failed"]')
    expect(failed).to_be_visible()
    assert int(failed.get_attribute("data-count") or 0) >= 3

    # And its failed tile leads to the actions list filtered to the failed ones
    failed.click()
    expect(page).to_have_url(re.compile(r"/actions/\?(.*&)?status=failed"))
    require_built(page, None, "the actions list")
    expect(page.locator(f"main table {link_to(studio.seeded['failed'])}").first).to_be_visible()


def test_an_operator_filters_the_actions_list_to_the_failed_ones(page: Page, studio: Studio) -> None:
    # Given the actions list, unfiltered: succeeded, pending, performing and failed actions
    response = page.goto("/actions/")
    require_built(page, response, "the actions list")
    expect(page.get_by_role("heading", name="Actions", level=1)).to_be_visible()
    expect(page.locator("main table .badge.status-succeeded").first).to_be_visible()

    # When the operator picks the status "failed" in the filters and applies them
    page.get_by_label("Status").select_option("failed")
    page.get_by_role("button", name="Filter", exact=True).click()

    # Then the filter is in the URL, so it can be shared
    expect(page).to_have_url(re.compile(r"status=failed"))
    # And the list shows the failed forecast trees, and nothing but failed actions
    expect(page.locator(f"main table {link_to(studio.seeded['failed'])}").first).to_be_visible()
    expect(page.locator("main table .badge.status-failed").first).to_be_visible()
    expect(page.locator("main table .badge[class*='status-']:not(.status-failed)")).to_have_count(0)

    # And the shared URL shows the same list in a new tab
    shared = page.context.new_page()
    shared.goto(page.url)
    expect(shared.get_by_label("Status")).to_have_value("failed")
    expect(shared.locator("main table .badge[class*='status-']:not(.status-failed)")).to_have_count(0)
    shared.close()


def test_a_failed_tree_shows_its_failure_path_from_the_root_to_the_failing_leaf(
    page: Page, studio: Studio
) -> None:
    root, leaf = studio.seeded["failed"], studio.seeded["failing_leaf"]
    # Given the failed actions list
    response = page.goto("/actions/?status=failed")
    require_built(page, response, "the actions list")

    # When the operator opens the failed forecast's tree from it
    page.locator(f"main table {link_to(root)}").first.click()
    expect(page).to_have_url(re.compile(rf"/actions/{root}$"))
    require_built(page, None, "the action page")

    # Then the page shows the root action, failed
    expect(page.get_by_role("heading", level=1)).to_contain_text("publish")
    expect(status_badge(page)).to_have_text("failed")

    # And the failure path runs from the root to the failing leaf
    path = page.get_by_role("region", name="Failure path")
    expect(path.get_by_role("listitem")).to_have_text(
        [re.compile(r"publish"), re.compile(r"query_warehouse"), re.compile(r"open_connection")]
    )
    expect(path).to_contain_text("WarehouseOffline")
    expect(path).to_contain_text("the warehouse did not answer for south")
    expect(path.locator(link_to(leaf)).first).to_be_visible()

    # And the tree highlights that path, and only it: not read_calendar, which succeeded beside it
    tree = page.get_by_role("region", name="Tree")
    expect(tree.locator("li.tn").first).to_be_visible()
    # Computed styles are the stylesheet's only once it has loaded: under load the tree
    # could be read with the browser's default link style (a CI run on 7623d52 did so).
    page.wait_for_load_state("load")
    nodes = tree.locator("li.tn").evaluate_all(TREE_NODES)
    on_path = [n["label"] for n in nodes if n["onPath"]]
    assert [re.sub(r"#\d+ ", "", label) for label in on_path] == [
        "publish",
        "query_warehouse",
        "open_connection",
    ], nodes
    beside = next(n for n in nodes if "read_calendar" in n["label"])
    highlighted = next(n for n in nodes if "open_connection" in n["label"])
    assert not beside["onPath"]
    assert (highlighted["weight"], highlighted["color"]) != (beside["weight"], beside["color"]), nodes


def test_retrying_a_failed_tree_makes_it_succeed_live_without_reloading_the_page(
    page: Page, studio: Studio
) -> None:
    # Given a failed forecast tree whose warehouse is back online
    action_id = studio.seeded["to_retry"]
    response = page.goto(f"/actions/{action_id}")
    require_built(page, response, "the action page")
    expect(status_badge(page)).to_have_text("failed")
    expect(page.get_by_role("region", name="Failure path")).to_be_visible()
    page.evaluate("window.stillTheSamePage = true")

    # When the operator retries it, saying why
    retry = page.locator("form").filter(has=page.get_by_role("button", name="Retry", exact=True))
    retry.get_by_label("Reason").fill("the warehouse is back")
    retry.get_by_role("button", name="Retry", exact=True).click()

    # Then the page says so and shows the tree reopened (its leaf takes two seconds to answer)
    expect(page.get_by_text(f"Action {action_id} was retried")).to_be_visible()
    expect(status_badge(page)).to_have_text(re.compile(r"^(pending|performing)$"))

    # And the tree succeeds, on the page as it is (htmx polling)
    expect(status_badge(page)).to_have_text("succeeded", timeout=LIVE_MS)
    expect(page.get_by_role("region", name="Failure path")).to_have_count(0)
    tree = page.get_by_role("region", name="Tree")
    expect(tree.locator("li.tn.status-failed")).to_have_count(0)
    expect(tree.locator("li.tn.on-path")).to_have_count(0)
    assert page.evaluate("window.stillTheSamePage") is True, "the page was reloaded"
    assert page.url.endswith(f"/actions/{action_id}")

    # And the polling stopped with the finished tree
    expect(page.locator("#action-live")).to_have_attribute("data-running", "false")
    expect(page.locator("#action-live[hx-get]")).to_have_count(0)


def test_approving_a_waiting_outbound_action_moves_its_lane(page: Page, studio: Studio) -> None:
    waiting, approval, following = (
        studio.seeded["waiting_refund"],
        studio.seeded["approval"],
        studio.seeded["next_refund"],
    )
    # Given the lanes page: in lane refunds/ada, refund #1 performs and waits for its
    # manager's approval, and refund #3 is queued behind it (#2 was superseded by it)
    # (single=1: once the queue is empty the lane has a single action, still shown)
    response = page.goto("/lanes/?single=1")
    require_built(page, response, "the lanes page")
    lane = page.locator(f'[data-lane="{studio.seeded["lane"]}"]')
    performing, why, queue = (lane.locator("td").nth(i) for i in range(2, 5))
    expect(performing.locator(link_to(waiting))).to_have_count(1)
    expect(why.locator(link_to(approval))).to_have_count(1)
    expect(queue.locator(link_to(following))).to_have_count(1)
    page.evaluate("window.stillTheSamePage = true")

    # When the operator follows the lane's reason to the approval, in a second tab, and
    # approves it with a note
    tab = page.context.new_page()
    tab.goto(why.locator(link_to(approval)).first.get_attribute("href") or "")
    require_built(tab, None, "the action page")
    expect(status_badge(tab)).to_have_text("performing")
    approve = tab.locator("form").filter(has=tab.get_by_role("button", name="Approve", exact=True))
    approve.get_by_label("Note").fill("approved on the phone with ada")
    approve.get_by_role("button", name="Approve", exact=True).click()

    # Then the approval succeeded
    expect(status_badge(tab)).to_have_text("succeeded", timeout=LIVE_MS)
    tab.close()

    # And the lanes page, left open, shows the lane move on: refund #3 now performs
    page.bring_to_front()
    expect(performing.locator(link_to(following))).to_have_count(1, timeout=LIVE_MS)
    expect(queue.locator(link_to(following))).to_have_count(0)
    assert page.evaluate("window.stillTheSamePage") is True, "the lanes page was reloaded"

    # And refund #1 paid out
    page.goto(f"/actions/{waiting}")
    expect(status_badge(page)).to_have_text("succeeded", timeout=LIVE_MS)

    # And the audit says who approved it, and why
    response = page.goto("/audit/")
    require_built(page, response, "the audit page")
    entry = page.locator("main tr").filter(has=page.locator(link_to(approval)))
    expect(entry.first).to_contain_text(studio.user)
    expect(entry.first).to_contain_text("approved on the phone with ada")
