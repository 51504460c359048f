"""An operator's day on the action page, in a real browser (issue 12's acceptance): skip a
failed leaf from the root's failure path and watch the tree carry on; read the graph of a
failed tree with its failure path in bold and open a node from it; jump to an action by id
from the header (and from the keyboard), with a clear message for an unknown id; switch
the times to local time; see the shortcuts.

Not a spec case: issue 12's browser acceptance. The studio runs as ``stepwise serve`` with
tests/browser/workflows.py's seeded data (see its docstring for the trees).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from tests.browser.conftest import new_page
from tests.browser.support import Studio, playwright_api

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

expect = playwright_api().expect

STAMP = "%Y-%m-%d %H:%M:%S"

#: The skipped tree carries on on the studio's in-process worker, seen through polling.
LIVE_MS = 20_000


def state(page: Page) -> str:
    return page.locator(".state-badge").inner_text().strip().lower()


def test_skipping_a_failed_leaf_from_the_failure_path_lets_the_tree_succeed(
    page: Page, studio: Studio
) -> None:
    root, leaf = studio.seeded["to_skip"], studio.seeded["to_skip_leaf"]
    # Given the page of a forecast that failed because its warehouse connection failed
    page.goto(f"/actions/{root}")
    expect(page.locator(".state-badge")).to_have_text("failed")
    path = page.get_by_role("region", name="Failure path")
    expect(path).to_contain_text("open_connection")

    # When the operator skips the failed leaf from the failure path, with a note
    skip = path.locator("form.skip-leaf")
    skip.get_by_label("Note").fill("connection checked by hand")
    page.once("dialog", lambda dialog: dialog.accept())
    skip.get_by_role("button", name=f"Skip #{leaf}").click()

    # Then the page says so, and the tree carries on to succeed, live
    expect(page.get_by_text(f"Action {leaf} was skipped")).to_be_visible()
    expect(page.locator(".state-badge")).to_have_text("succeeded", timeout=LIVE_MS)
    expect(page.get_by_role("region", name="Failure path")).to_have_count(0)
    tree = page.get_by_role("region", name="Tree")
    expect(tree.locator("li.tn.status-failed")).to_have_count(0)

    # And the leaf's own page says who skipped it and why
    page.goto(f"/actions/{leaf}")
    expect(page.locator(".state-badge")).to_have_text("succeeded")
    expect(page.locator(".state-line")).to_contain_text("skipped by")
    expect(page.locator(".state-line")).to_contain_text("connection checked by hand")


def test_the_graph_draws_the_failure_path_in_bold_and_opens_a_node(page: Page, studio: Studio) -> None:
    root, leaf = studio.seeded["failed"], studio.seeded["failing_leaf"]
    # Given the page of a failed tree, a small one: the list and the graph side by side
    page.goto(f"/actions/{root}")
    graph = page.locator("svg.tree-graph")
    expect(graph).to_be_visible()
    expect(page.locator(".tree-list ul.tree")).to_be_visible()

    # Then every action is a node coloured by its status, the path root -> leaf in bold
    nodes = graph.locator("a.gn")
    expect(nodes).to_have_count(4)  # publish, query_warehouse, open_connection, read_calendar
    on_path = graph.locator("a.gn.on-path")
    expect(on_path).to_have_count(3)
    expect(on_path.last).to_have_attribute("data-node", str(leaf))
    drawn = graph.locator("a.gn").evaluate_all(
        """els => els.map(a => ({id: a.dataset.node, path: a.classList.contains("on-path"),
                              fill: getComputedStyle(a.querySelector("circle")).fill,
                              weight: getComputedStyle(a.querySelector("text")).fontWeight}))"""
    )
    failed = [n for n in drawn if n["path"]]
    succeeded = [n for n in drawn if not n["path"]]
    assert len({n["fill"] for n in failed}) == 1 and failed[0]["fill"] != succeeded[0]["fill"], drawn
    assert all(int(n["weight"]) >= 700 for n in failed) and all(int(n["weight"]) < 700 for n in succeeded)
    path_edges = graph.locator("path.ge.on-path")
    expect(path_edges).to_have_count(4)  # root -> its step -> query_warehouse -> its step -> leaf
    widths = path_edges.evaluate_all("els => els.map(e => parseFloat(getComputedStyle(e).strokeWidth))")
    other = graph.locator("path.ge:not(.on-path)").first.evaluate(
        "e => parseFloat(getComputedStyle(e).strokeWidth)"
    )
    assert min(widths) > other

    # And the graph alone can be chosen, and clicking a node opens its page
    page.get_by_role("navigation", name="Show the tree as").get_by_role("link", name="Graph").click()
    expect(page).to_have_url(re.compile(rf"/actions/{root}\?view=graph$"))
    expect(page.locator(".tree-list")).to_have_count(0)
    page.locator(f'svg.tree-graph a.gn[data-node="{leaf}"]').click()
    expect(page).to_have_url(re.compile(rf"/actions/{leaf}$"))
    expect(page.get_by_role("heading", level=1)).to_contain_text("open_connection")


def test_jumping_to_an_action_by_id_from_the_header_and_the_keyboard(page: Page, studio: Studio) -> None:
    target = studio.seeded["published"]
    # Given any page, the overview
    page.goto("/")

    # When the operator types an id into the header's "Go to" box
    page.get_by_label("Go to").fill(f"#{target}")
    page.get_by_label("Go to").press("Enter")

    # Then the action's page opens
    expect(page).to_have_url(re.compile(rf"/actions/{target}$"))
    expect(page.get_by_role("heading", level=1)).to_contain_text("publish")

    # And "/" puts the cursor in the box from anywhere (once the page's script has run);
    # an unknown id says so, clearly
    page.wait_for_load_state("load")
    page.keyboard.press("/")
    expect(page.get_by_label("Go to")).to_be_focused()
    page.keyboard.type("987654")
    page.keyboard.press("Enter")
    expect(page.get_by_text("There is no action 987654")).to_be_visible()
    page.get_by_label("Go to").fill("not-an-id")
    page.get_by_label("Go to").press("Enter")
    expect(page.get_by_text("Jump to an action by its id, a whole number like 42")).to_be_visible()


@pytest.fixture
def tokyo_page(browser: Browser, studio: Studio, signed_in: dict[str, Any]) -> Iterator[Page]:
    """A signed-in tab in a browser whose time zone is Tokyo's (UTC+9, no summer time)."""
    yield from new_page(browser, studio, storage_state=signed_in, timezone_id="Asia/Tokyo")


def test_times_switch_to_local_time_and_the_shortcuts_are_listed(tokyo_page: Page, studio: Studio) -> None:
    page = tokyo_page
    # Given an action page in UTC (the default), in a browser in Tokyo
    page.goto(f"/actions/{studio.seeded['published']}")
    toggle = page.get_by_role("button", name="UTC")
    expect(toggle).to_be_visible()
    created = page.locator(".facts time").first
    utc = created.inner_text()

    # When the operator presses t
    page.keyboard.press("t")

    # Then the times show in her time zone, with the UTC time kept as their title
    expect(page.get_by_role("button", name="Local time")).to_have_attribute("aria-pressed", "true")
    local = created.locator(".local-time")
    expect(local).to_have_attribute("title", f"{utc} UTC")
    shown = datetime.strptime(local.inner_text(), STAMP)
    assert shown == datetime.strptime(utc, STAMP) + timedelta(hours=9)

    # And it stays so on the next page, until t again
    page.reload()
    expect(page.get_by_role("button", name="Local time")).to_be_visible()
    page.keyboard.press("t")
    expect(page.get_by_role("button", name="UTC")).to_be_visible()
    expect(created).to_have_text(utc)

    # And "?" lists the shortcuts
    page.keyboard.press("?")
    dialog = page.get_by_role("dialog", name="Keyboard shortcuts")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("go to an action by its id")
    expect(dialog).to_contain_text("the tree as a list, a graph, or both")
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()


def test_copy_as_json_puts_the_api_answer_on_the_clipboard(page: Page, studio: Studio) -> None:
    action_id = studio.seeded["published"]
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=studio.url)
    page.goto(f"/actions/{action_id}")
    expect(page.get_by_role("link", name="API")).to_have_attribute("href", f"/api/actions/{action_id}")
    page.get_by_role("button", name="Copy as JSON").click()
    expect(page.get_by_role("button", name="Copied")).to_be_visible()
    copied = json.loads(page.evaluate("navigator.clipboard.readText()"))
    assert (copied["id"], copied["name"]) == (action_id, "publish")
