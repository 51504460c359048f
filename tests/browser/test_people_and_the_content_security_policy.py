"""An admin creates a viewer on the People page; the viewer signs in and cannot run a command:
the action page offers none, and a command sent anyway is refused. Every page works under
the studio's Content-Security-Policy (no inline script, no eval): the browser reports no
violation while htmx polls and swaps.

Not a spec case: issue 12's browser acceptance, "admin creating a viewer who then cannot run
a command", and "Never a 500, and hardened".
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from tests.browser.support import Studio, playwright_api, require_built

if TYPE_CHECKING:
    from playwright.sync_api import ConsoleMessage, Page

expect = playwright_api().expect

PASSWORD = "a viewer's password"


def violations(page: Page) -> list[str]:
    """The Content-Security-Policy violations the browser reports on ``page``, as they come."""
    found: list[str] = []

    def seen(message: ConsoleMessage) -> None:
        if "Content Security Policy" in message.text or "Content-Security-Policy" in message.text:
            found.append(message.text)

    page.on("console", seen)
    return found


def test_an_admin_creates_a_viewer_who_then_cannot_run_a_command(
    page: Page, signed_out_page: Page, studio: Studio
) -> None:
    admin_violations = violations(page)
    # Given the admin on the overview, with People in the navigation
    page.goto("/")
    page.get_by_role("link", name="People").click()
    expect(page.get_by_role("heading", name="People", level=1)).to_be_visible()

    # When the admin adds vera as a viewer
    form = page.locator("form.new-user")
    form.get_by_label("Name").fill("vera")
    form.get_by_label("Password").fill(PASSWORD)
    form.get_by_label("Role").select_option("viewer")
    form.get_by_role("button", name="Create user").click()

    # Then she is listed, as a viewer
    expect(page.locator("#flash")).to_contain_text("Created viewer vera")
    row = page.locator('tr[data-user="vera"]')
    expect(row.get_by_label("Role of vera")).to_have_value("viewer")

    # When vera signs in, in her own browser
    viewer = signed_out_page
    viewer_violations = violations(viewer)
    viewer.goto("/")
    viewer.get_by_label("Name").fill("vera")
    viewer.get_by_label("Password").fill(PASSWORD)
    viewer.get_by_role("button", name="Sign in").click()
    expect(viewer.get_by_role("heading", name="Overview", level=1)).to_be_visible()
    expect(viewer.locator(".badge.role-viewer")).to_have_text("viewer")
    expect(viewer.get_by_role("link", name="People")).to_have_count(0)

    # Then the failed tree's page offers her no command
    failed = studio.seeded["failed"]
    viewer.goto(f"/actions/{failed}")
    commands = viewer.locator("#action-commands")
    expect(commands).to_contain_text("You are a viewer")
    expect(commands.get_by_role("button", name="Retry")).to_have_count(0)

    # And a retry sent anyway, with her session's CSRF token, is refused and changes nothing
    answer = viewer.evaluate(
        """async (url) => {
          const token = JSON.parse(document.body.getAttribute("hx-headers"))["X-CSRF-Token"];
          const headers = {"X-CSRF-Token": token, "HX-Request": "true"};
          const r = await fetch(url, {method: "POST", headers});
          return {status: r.status, text: await r.text()};
        }""",
        f"/actions/{failed}/retry",
    )
    assert answer["status"] == 403
    assert "Only an operator may do this" in answer["text"]
    viewer.reload()
    expect(
        viewer.get_by_role("region", name="Summary").locator(".badge[class*='status-']").first
    ).to_have_text("failed")

    # And the People page is not hers
    assert (viewer.goto("/people/") or None).status == 403  # type: ignore[union-attr]

    # When the admin disables her, her session ends at once
    page.reload()
    page.locator('tr[data-user="vera"]').get_by_role("button", name="Disable").click()
    expect(page.locator("#flash")).to_contain_text("vera is disabled")
    viewer.goto("/")
    expect(viewer).to_have_url(re.compile(r"/login"))

    # And no page broke the Content-Security-Policy
    assert admin_violations == [] and viewer_violations == []


def test_live_pages_poll_and_swap_under_the_content_security_policy(page: Page, studio: Studio) -> None:
    """The lanes page polls (every 3 s) through htmx with eval disabled: a swap arrives, and
    the browser reports no violation."""
    found = violations(page)
    page.goto("/lanes/?single=1")
    lanes = page.locator("#lanes")
    expect(lanes).to_have_attribute("data-poll", "")
    with page.expect_response(re.compile(r"/lanes/\?single=1"), timeout=10_000) as polled:
        pass
    assert polled.value.status == 200
    assert polled.value.request.headers.get("hx-request") == "true"
    # The action page's timeline bars are placed by static/studio.js (no style attribute)
    response = page.goto(f"/actions/{studio.seeded['published']}")
    require_built(page, response, "the action page")
    bars = page.locator(".gfill")
    if bars.count():
        assert bars.first.evaluate("el => el.style.width").endswith("%")
    assert found == []
