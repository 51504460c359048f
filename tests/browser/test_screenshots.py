"""Screenshots of every page of the studio, in light and dark mode, for the README.

They refresh docs/screenshots/<page>-<light|dark>.png only when asked, with
``STEPWISE_SCREENSHOTS=1``; ``STEPWISE_SCREENSHOTS=<folder>`` puts them in that folder.
Otherwise they go to a temporary folder, so that running the suite leaves the checkout
clean, and are still checked to render.

Not a spec case: issue 4's acceptance ("screenshots of each page, light and dark, are
produced by the browser tests"). Each test also checks that its page shows what it is about
and that the dark mode really changes the page's colours. They run after the walk-through
(file order), so the audit page shows its retry and approval. A page that is not built yet
xfails and leaves no screenshot.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.browser import support
from tests.browser.support import ROOT, Studio, playwright_api, require_built, screenshot

if TYPE_CHECKING:
    from playwright.sync_api import Page

expect = playwright_api().expect


#: The README's screenshots, refreshed with STEPWISE_SCREENSHOTS=1.
README_SCREENSHOTS = ROOT / "docs" / "screenshots"


def screenshots_folder(asked: str | None, temporary: Path) -> Path:
    """Where this run's screenshots go: the README's folder only when asked (``1``), the
    folder named, or else ``temporary``."""
    if not asked or asked.strip().lower() in ("0", "false", "no", "off"):
        return temporary
    if asked.strip().lower() in ("1", "true", "yes", "on"):
        return README_SCREENSHOTS
    return Path(asked)


@pytest.fixture(scope="module", autouse=True)
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = screenshots_folder(
        os.environ.get("STEPWISE_SCREENSHOTS"), tmp_path_factory.mktemp("screenshots")
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(support, "SCREENSHOTS", folder)  # read by support.screenshot at each call
        yield folder


def test_screenshots_refresh_the_readmes_only_when_asked(tmp_path: Path) -> None:
    assert screenshots_folder(None, tmp_path) == tmp_path
    assert screenshots_folder("", tmp_path) == tmp_path
    assert screenshots_folder("0", tmp_path) == tmp_path
    assert screenshots_folder("1", tmp_path) == README_SCREENSHOTS
    assert screenshots_folder(str(tmp_path / "elsewhere"), tmp_path) == tmp_path / "elsewhere"


def background(page: Page) -> str:
    return str(page.evaluate("getComputedStyle(document.body).backgroundColor"))


#: Tables whose header row is drawn over their first row (a sticky header gone wrong).
COVERED_ROWS = """
() => [...document.querySelectorAll("main table")].filter(table => {
  const head = table.tHead && table.tHead.rows[0] && table.tHead.rows[0].cells[0];
  const first = table.tBodies[0] && table.tBodies[0].rows[0] && table.tBodies[0].rows[0].cells[0];
  if (!head || !first) return false;
  return head.getBoundingClientRect().bottom > first.getBoundingClientRect().top + 1;
}).map(table => table.className || table.id || "a table")
"""


def shoot(page: Page, name: str) -> None:
    """Both screenshots; then the checks that dark mode changes the background and that no
    table header hides a row (after the screenshots, so a page that fails them still has its
    pictures in the README)."""
    page.emulate_media(color_scheme="light")
    light = background(page)
    page.emulate_media(color_scheme="dark")
    dark = background(page)
    for path in screenshot(page, name):
        assert path.stat().st_size > 5_000, f"{path} looks empty"
    assert light != dark, f"{name}: dark mode leaves the background {light}"
    assert page.evaluate(COVERED_ROWS) == [], f"{name}: a table's header is drawn over its first row"


def test_the_sign_in_page_in_light_and_dark(signed_out_page: Page) -> None:
    page = signed_out_page
    page.goto("/login")
    expect(page.get_by_role("heading", name="Sign in to Stepwise")).to_be_visible()
    shoot(page, "login")


def overview(page: Page, studio: Studio) -> None:
    expect(page.get_by_role("heading", name="Overview", level=1)).to_be_visible()


def actions(page: Page, studio: Studio) -> None:
    expect(page.get_by_role("heading", name="Actions", level=1)).to_be_visible()
    expect(page.locator(f'main a[href$="/actions/{studio.seeded["failed"]}"]').first).to_be_visible()


def action(page: Page, studio: Studio) -> None:
    expect(page.get_by_role("heading", level=1)).to_contain_text("publish")
    expect(page.get_by_text("open_connection").first).to_be_visible()


def approval(page: Page, studio: Studio) -> None:
    expect(page.get_by_role("heading", level=1)).to_contain_text("manager_approval")
    expect(page.get_by_role("button", name="Approve", exact=True)).to_be_visible()
    expect(page.get_by_role("button", name="Reject", exact=True)).to_be_visible()


def lane(page: Page, studio: Studio) -> None:
    expect(page.get_by_role("heading", level=1)).to_contain_text(studio.seeded["lane"])


def lanes(page: Page, studio: Studio) -> None:
    expect(page.get_by_role("heading", name=re.compile(r"Lanes|Queues"), level=1)).to_be_visible()
    expect(page.get_by_text(studio.seeded["lane"]).first).to_be_visible()


def achievements(page: Page, studio: Studio) -> None:
    expect(page.get_by_role("heading", name="Achievements", level=1)).to_be_visible()
    expect(page.get_by_text("forecast/north").first).to_be_visible()


def catalog(page: Page, studio: Studio) -> None:
    expect(page.get_by_role("heading", name="Catalog", level=1)).to_be_visible()
    expect(page.get_by_text("query_warehouse").first).to_be_visible()


def audit(page: Page, studio: Studio) -> None:
    expect(page.get_by_role("heading", name="Audit", level=1)).to_be_visible()


PAGES: list[tuple[str, Callable[[Studio], str], Callable[[Page, Studio], None]]] = [
    ("overview", lambda s: "/", overview),
    ("actions", lambda s: "/actions/?status=failed", actions),
    ("action", lambda s: f"/actions/{s.seeded['failed']}", action),
    ("approval", lambda s: f"/actions/{s.seeded['other_approval']}", approval),
    ("lanes", lambda s: "/lanes/?single=1", lanes),  # the seeded lane may have emptied its queue
    ("lane", lambda s: f"/lanes/lane?key={s.seeded['lane']}", lane),
    ("achievements", lambda s: "/achievements/", achievements),
    ("catalog", lambda s: "/catalog/", catalog),
    ("audit", lambda s: "/audit/", audit),
]

#: Known faults of pages, outside the browser tests' files: the page's test xfails (not
#: strictly) with the diagnosis, and its screenshots are still taken.
KNOWN: dict[str, str] = {}


@pytest.mark.parametrize(
    ("name", "path", "check"),
    [
        pytest.param(*entry, id=entry[0], marks=[pytest.mark.xfail(reason=KNOWN[entry[0]], strict=False)])
        if entry[0] in KNOWN
        else pytest.param(*entry, id=entry[0])
        for entry in PAGES
    ],
)
def test_each_page_in_light_and_dark(
    page: Page,
    studio: Studio,
    name: str,
    path: Callable[[Studio], str],
    check: Callable[[Page, Studio], None],
) -> None:
    # Given the seeded studio, signed in as an operator
    # When the operator opens the page
    response = page.goto(path(studio))
    require_built(page, response, f"the {name} page")
    assert response is not None and response.ok, f"{path(studio)} answered {response and response.status}"

    # Then it shows what it is about, and it is photographed in light and dark mode
    check(page, studio)
    page.wait_for_load_state("networkidle")
    shoot(page, name)
