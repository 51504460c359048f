"""The studio on a phone: at 390 x 844 (an iPhone) no page scrolls sideways, in light and
dark mode; the header folds its links under a Menu button whose links are all reachable;
every control is a 44 px target; a wide table scrolls inside its own box, not the page.
Without JavaScript the links wrap instead, all on screen. The catalog's runs, the people
and the action page's failure path and tree fit their panels (cards or wrapped lines, as
the steps table does): nothing but code and the drawn graph scrolls sideways there; the
action page's header links sit in one even row.

Not a spec case: the studio's narrow-screen acceptance. The studio runs with
tests/browser/workflows.py's seeded data; these tests only read it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from tests.browser.conftest import new_page
from tests.browser.support import Studio, playwright_api, require_built

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

expect = playwright_api().expect

PHONE = {"width": 390, "height": 844}
NAV = ["Overview", "Actions", "Lanes", "Achievements", "Catalog", "Schedules", "Audit"]
#: A finger's target (WCAG 2.5.5), less a rounding pixel.
TARGET = 43.5

PAGES: list[tuple[str, Callable[[Studio], str]]] = [
    ("overview", lambda s: "/"),
    ("actions", lambda s: "/actions/"),
    ("failures by error", lambda s: "/actions/errors"),
    ("action", lambda s: f"/actions/{s.seeded['failed']}"),
    ("approval", lambda s: f"/actions/{s.seeded['other_approval']}"),
    ("compensation", lambda s: f"/actions/{s.seeded['parcel']}"),
    ("lanes", lambda s: "/lanes/?single=1"),
    ("lane", lambda s: f"/lanes/lane?key={s.seeded['lane']}"),
    ("achievements", lambda s: "/achievements/"),
    ("catalog", lambda s: "/catalog/"),
    ("definition", lambda s: "/catalog/Forecast/publish"),
    ("schedules", lambda s: "/schedules/"),
    ("audit", lambda s: "/audit/"),
    ("people", lambda s: "/people/"),
]

#: The visible controls (buttons, fields, the header's links) smaller than a finger.
SMALL_TARGETS = f"""
() => [...document.querySelectorAll(
    ".btn, select, input:not([type=checkbox]):not([type=radio]):not([type=hidden]), .topbar a"
  )].filter(e => {{
    const box = e.getBoundingClientRect();
    if (box.width === 0 || getComputedStyle(e).visibility === "hidden") return false;
    return box.height < {TARGET} || box.width < {TARGET};
  }}).map(e => e.outerHTML.slice(0, 120))
"""

#: What sticks out of the viewport's right edge without a box that scrolls it.
STICKING_OUT = """
() => [...document.querySelectorAll("body *")].filter(e => {
  const box = e.getBoundingClientRect();
  if (box.width === 0 || box.right <= window.innerWidth + 0.5) return false;
  for (let p = e.parentElement; p && p !== document.body; p = p.parentElement) {
    if (getComputedStyle(p).overflowX !== "visible") return false;
  }
  return true;
}).map(e => e.outerHTML.slice(0, 120))
"""


#: The boxes on the page (panels, a table's box) that scroll their content sideways,
#: except code (a traceback keeps its lines) and the drawn graph of a tree.
SCROLLING_SIDEWAYS = """
() => [...document.querySelectorAll("main *")].filter(e => {
  if (e.matches("pre, .graph-scroll")) return false;
  const style = getComputedStyle(e);
  return ["auto", "scroll"].includes(style.overflowX) && e.scrollWidth > e.clientWidth + 1;
}).map(e => `${e.tagName.toLowerCase()}.${e.className}: ${e.scrollWidth}px in ${e.clientWidth}px`)
"""

#: Each element's box, its label and the middle of its words (a Range around its text).
LINK_BOXES = """
elements => elements.map(e => {
  const box = e.getBoundingClientRect(), words = document.createRange();
  words.selectNodeContents(e);
  const text = words.getBoundingClientRect();
  return {label: e.textContent.trim(), left: box.left, right: box.right, height: box.height,
          text_middle: text.top + text.height / 2};
})
"""

#: The pages whose tables and failure path fit their panels on a phone.
FITTING: list[tuple[str, Callable[[Studio], str]]] = [
    ("catalog", lambda s: "/catalog/"),
    ("definition", lambda s: "/catalog/Forecast/publish"),
    ("overview", lambda s: "/"),
    ("people", lambda s: "/people/"),
    ("failed action", lambda s: f"/actions/{s.seeded['failed']}"),
    ("failing leaf", lambda s: f"/actions/{s.seeded['failing_leaf']}"),
]


@pytest.fixture
def phone(browser: Browser, studio: Studio, signed_in: dict[str, Any]) -> Iterator[Page]:
    """A signed-in tab 390 x 844 wide, in light mode."""
    yield from new_page(browser, studio, storage_state=signed_in, viewport=PHONE)


@pytest.fixture
def phone_without_javascript(browser: Browser, studio: Studio, signed_in: dict[str, Any]) -> Iterator[Page]:
    """The same phone, its JavaScript turned off."""
    yield from new_page(browser, studio, storage_state=signed_in, viewport=PHONE, java_script_enabled=False)


def no_sideways_scroll(page: Page, where: str) -> None:
    wide, shown = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert wide <= shown, f"{where} scrolls sideways, {wide}px in {shown}px: {page.evaluate(STICKING_OUT)}"


@pytest.mark.parametrize(("name", "path"), [pytest.param(*entry, id=entry[0]) for entry in PAGES])
def test_no_page_scrolls_sideways_on_a_phone(
    phone: Page, studio: Studio, name: str, path: Callable[[Studio], str]
) -> None:
    page = phone
    # Given a phone 390 px wide, signed in as an operator
    # When the operator opens the page
    response = page.goto(path(studio))
    require_built(page, response, f"the {name} page")
    assert response is not None and response.ok, f"{path(studio)} answered {response and response.status}"
    page.wait_for_load_state("networkidle")

    # Then the page itself never scrolls sideways, in light mode or dark
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)  # type: ignore[arg-type]
        no_sideways_scroll(page, f"the {name} page ({scheme})")

    # And every control is a finger's target
    assert page.evaluate(SMALL_TARGETS) == [], f"the {name} page has controls under 44 px"

    # And the header folds its links under Menu, which shows each of them on screen
    menu = page.locator(".topbar").get_by_role("button", name="Menu", exact=True)
    expect(menu).to_have_attribute("aria-expanded", "false")
    expect(page.locator(".topbar .nav")).to_be_hidden()
    menu.click()
    expect(menu).to_have_attribute("aria-expanded", "true")
    for label in NAV:
        link = page.locator(".topbar .nav").get_by_role("link", name=label, exact=True)
        expect(link).to_be_in_viewport()
        box = link.bounding_box()
        assert box is not None and 0 <= box["x"] <= PHONE["width"] - box["width"], f"{label}: {box}"
        assert box["height"] >= TARGET, f"the {label} link is {box['height']}px high"
    expect(page.locator(".topbar").get_by_role("button", name="Sign out")).to_be_in_viewport()
    no_sideways_scroll(page, f"the {name} page with its menu open")
    assert page.evaluate(SMALL_TARGETS) == [], f"the {name} page's menu has links under 44 px"

    # And Escape folds it again
    page.keyboard.press("Escape")
    expect(menu).to_have_attribute("aria-expanded", "false")
    expect(page.locator(".topbar .nav")).to_be_hidden()


def test_the_actions_table_scrolls_in_its_own_box_on_a_phone(phone: Page) -> None:
    page = phone
    # Given the actions list on a phone: more columns than 390 px hold
    page.goto("/actions/")
    table = page.locator("table.actions-table")
    expect(table).to_be_visible()
    box = table.locator("xpath=ancestor::*[contains(concat(' ', @class, ' '), ' table-scroll ')][1]")
    widths = box.evaluate("e => [e.scrollWidth, e.clientWidth, getComputedStyle(e).overflowX]")
    assert widths[0] > widths[1] and widths[2] == "auto", f"the table's box does not scroll: {widths}"

    # When the operator scrolls the table sideways
    box.evaluate("e => { e.scrollLeft = 200; }")

    # Then the table moves inside its box, and the page does not
    assert box.evaluate("e => e.scrollLeft") > 0
    assert page.evaluate("window.scrollX") == 0
    no_sideways_scroll(page, "the actions page, its table scrolled")
    # And the list's own heading stays where it was (only the table scrolled)
    heading = page.locator("#list-title, .list-panel h2").first
    heading_box = heading.bounding_box()
    assert heading_box is not None and heading_box["x"] >= 0


@pytest.mark.parametrize(("name", "path"), [pytest.param(*entry, id=entry[0]) for entry in FITTING])
def test_tables_and_the_failure_path_fit_their_panels_on_a_phone(
    phone: Page, studio: Studio, name: str, path: Callable[[Studio], str]
) -> None:
    page = phone
    # Given a phone 390 px wide
    # When the operator opens the page, its traceback unfolded where it has one
    page.goto(path(studio))
    page.wait_for_load_state("networkidle")
    for traceback in page.locator("details.traceback").all():
        traceback.evaluate("details => { details.open = true; }")

    # Then no panel scrolls sideways: its rows are cards or wrapped lines, in light or dark
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)  # type: ignore[arg-type]
        assert page.evaluate(SCROLLING_SIDEWAYS) == [], f"the {name} page ({scheme}) scrolls a panel sideways"
    no_sideways_scroll(page, f"the {name} page")
    assert page.evaluate(SMALL_TARGETS) == [], f"the {name} page has controls under 44 px"


def test_the_people_table_is_a_card_per_user_on_a_phone(phone: Page, studio: Studio) -> None:
    page = phone
    # Given the people page on a phone
    page.goto("/people/")
    row = page.locator(f'tr[data-user="{studio.user}"]')

    # Then each user is a card: the name on its own line, each fact under its column's name
    name, role = row.locator("th").bounding_box(), row.get_by_label(f"Role of {studio.user}").bounding_box()
    assert name is not None and role is not None and role["y"] >= name["y"] + name["height"], (name, role)
    labels = row.locator("td").evaluate_all(
        "cells => cells.map(c => getComputedStyle(c, '::before').content)"
    )
    assert labels[:3] == ['"Role"', '"Last sign-in"', '"State"'], labels
    expect(row.get_by_role("button", name="Change role")).to_be_in_viewport()


def test_the_action_pages_header_links_sit_in_one_even_row_on_a_phone(phone: Page, studio: Studio) -> None:
    page = phone
    # Given a failed action's page on a phone (its "Copy as JSON" shown by action.js)
    page.goto(f"/actions/{studio.seeded['failed']}")
    links = page.locator(".page-head .actions > *")
    expect(links.filter(has_text="Copy as JSON")).to_be_visible()

    # Then API, Copy as JSON and All actions are one row of finger-sized targets, on screen
    boxes = links.evaluate_all(LINK_BOXES)
    assert [box["label"] for box in boxes] == ["API", "Copy as JSON", "All actions"], boxes
    assert all(
        box["height"] >= TARGET and 0 <= box["left"] <= box["right"] <= PHONE["width"] for box in boxes
    ), boxes
    # whose words are on one line (their text centred alike, not at a link's top)
    middles = [box["text_middle"] for box in boxes]
    assert max(middles) - min(middles) <= 1, f"the header links' words are not on one line: {boxes}"
    # starting under the title, as every other row of the page does
    title = page.locator(".page-head h1").bounding_box()
    assert title is not None and abs(boxes[0]["left"] - title["x"]) <= 1, (title, boxes)


def test_without_javascript_the_links_wrap_on_a_phone(phone_without_javascript: Page) -> None:
    page = phone_without_javascript
    # Given a phone whose browser runs no JavaScript
    # When the operator opens the actions list
    page.goto("/actions/")

    # Then there is no Menu button: every link is on screen, wrapped, and nothing scrolls
    expect(page.locator(".menu-toggle")).to_have_count(0)
    nav = page.locator(".topbar .nav")
    for label in NAV:
        expect(nav.get_by_role("link", name=label, exact=True)).to_be_in_viewport()
    no_sideways_scroll(page, "the actions page without JavaScript")
    assert page.evaluate(SMALL_TARGETS) == [], "without JavaScript, controls under 44 px"


def test_a_wide_screen_has_no_menu_button(page: Page) -> None:
    # Given a laptop's width, the header's links in one row
    page.goto("/")
    # Then the Menu button is not shown, and every link is
    expect(page.locator(".menu-toggle")).to_be_hidden()
    for label in NAV:
        expect(page.locator(".topbar .nav").get_by_role("link", name=label, exact=True)).to_be_visible()
