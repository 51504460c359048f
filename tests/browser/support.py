"""Helpers of the browser tests: where Chromium is, how it is launched, screenshots, and the
check that a page exists yet (the studio's pages are built in parallel). Fixtures are in
conftest.py."""

from __future__ import annotations

import importlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Locator, Page, Response

ROOT = Path(__file__).resolve().parents[2]
#: Debian's Chromium (scripts/test installs it); never a browser downloaded by Playwright.
CHROMIUM = os.environ.get("STEPWISE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: Where the screenshots go (the README links docs/screenshots/).
SCREENSHOTS = Path(os.environ.get("STEPWISE_SCREENSHOTS", ROOT / "docs" / "screenshots"))
#: How the tests seed the studio's database (tests/browser/workflows.py), in a process of
#: its own: these tests' own process never imports the workflows (their actors would join
#: the registry of the other tests). Through an import, not ``-m``, so that error classes
#: are named tests.browser.workflows.WarehouseOffline, as in the studio, not __main__.….
SEED_COMMAND = "import sys; from tests.browser.workflows import main; sys.exit(main(sys.argv[1:]))"
#: Playwright's wait for an element or an expectation (the studio polls every 2 s).
TIMEOUT_MS = 10_000


@dataclass
class Studio:
    """The running studio: its URL, the operator's credentials and the seeded ids."""

    url: str
    user: str
    password: str
    seeded: dict[str, Any]
    output: Path
    process: subprocess.Popen[bytes]

    def printed(self) -> str:
        return self.output.read_text(errors="replace")


PLACEHOLDER = "This page is not built yet."

CI = os.environ.get("CI") == "true"


def playwright_api() -> ModuleType:
    """``playwright.sync_api``, for a test module to import at its top. Without the package
    the module is skipped, except under CI=true, where its import error fails the run."""
    try:
        return importlib.import_module("playwright.sync_api")
    except ImportError:
        if CI:
            raise
        pytest.skip(
            "the playwright package is not installed (pip install -e '.[test]')", allow_module_level=True
        )


def require_built(page: Page, response: Response | None, what: str) -> None:
    """xfail (not fail) while ``what`` is still a placeholder or not routed: the pages are
    being built in parallel. A built page that misbehaves fails as usual."""
    if response is not None and response.status == 404:
        pytest.xfail(f"{what} is not built yet: {response.url} answers 404")
    if page.get_by_text(PLACEHOLDER).count():
        pytest.xfail(f"{what} is not built yet: {page.url} is the placeholder page")


def screenshot(page: Page, name: str) -> list[Path]:
    """``docs/screenshots/<name>-light.png`` and ``-dark.png`` of the page as it is now."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    taken = []
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)  # type: ignore[arg-type]
        page.wait_for_timeout(100)  # let the colours settle
        path = SCREENSHOTS / f"{name}-{scheme}.png"
        page.screenshot(path=str(path), full_page=True, animations="disabled")
        taken.append(path)
    page.emulate_media(color_scheme="light")
    return taken


def status_badge(page: Page) -> Locator:
    """The status of the action whose page this is: the badge of its summary."""
    return page.get_by_role("region", name="Summary").locator(".badge[class*='status-']").first
