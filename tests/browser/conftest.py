"""Fixtures of the browser tests: the real studio in a subprocess, driven by Debian's Chromium
through Playwright.

The studio is ``stepwise serve`` on a free port with a temporary SQLite file and no broker
URL (the embedded default: in-memory broker, in-process worker), importing this folder's
deterministic workflows (tests/browser/workflows.py) whose data is seeded before it starts.
The tests sign in through the login page once, as the operator ``admin`` whose password
``serve`` prints, and each test gets a fresh ``page`` of that signed-in session.

Playwright's Python package brings its driver, never a browser: Chromium is Debian's
(``/usr/bin/chromium``, installed by scripts/test). Never run ``playwright install``. Under
CI=true a missing Chromium or Playwright fails the tests; elsewhere they are skipped.

    .venv/bin/pytest -q tests/browser          # screenshots land in docs/screenshots/
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.browser.support import CHROMIUM, CHROMIUM_ARGS, ROOT, SEED_COMMAND, TIMEOUT_MS, Studio
from tests.conftest import unavailable

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page, Playwright


@pytest.fixture(autouse=True)
def database() -> Iterator[None]:
    """Overrides tests/conftest.py's fixture: the studio under test brings its own database,
    so these tests run once, not once per backend."""
    yield


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def serve_command() -> list[str]:
    script = Path(sys.executable).parent / "stepwise"
    return [str(script)] if script.exists() else [sys.executable, "-m", "engine.cli"]


def environment() -> dict[str, str]:
    """This process's environment without a broker, database or secret: the embedded default."""
    dropped = ("REDIS_URL", "RABBITMQ_URL", "DATABASE_URL", "STEPWISE_ENV", "SECRET_KEY", "STEPWISE_IMPORTS")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return env


def wait_until_up(studio: Studio, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if studio.process.poll() is not None:
            raise AssertionError(
                f"stepwise serve exited with {studio.process.returncode}:\n{studio.printed()}"
            )
        try:
            with urllib.request.urlopen(studio.url + "/login", timeout=2) as answer:
                if answer.status == 200:
                    return
        except (OSError, urllib.error.URLError):
            pass
        time.sleep(0.2)
    raise AssertionError(f"the studio did not answer at {studio.url} within {seconds}s:\n{studio.printed()}")


@pytest.fixture(scope="package")
def studio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Studio]:
    """``stepwise serve`` on a seeded SQLite file, stopped with SIGTERM after the last browser
    test (package scope: it does not idle on while the rest of the suite runs)."""
    folder = tmp_path_factory.mktemp("studio")
    url = f"sqlite:///{folder / 'studio.db'}"
    env = environment()
    seeding = subprocess.run(
        [sys.executable, "-c", SEED_COMMAND, "seed", url],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert seeding.returncode == 0, f"seeding failed:\n{seeding.stdout}\n{seeding.stderr}"
    seeded = json.loads(seeding.stdout.strip().splitlines()[-1])

    port = free_port()
    output = folder / "serve.out"
    with output.open("wb") as out:
        process = subprocess.Popen(
            [*serve_command(), "serve", "--port", str(port), "--database-url", url],
            cwd=folder,
            env={**env, "STEPWISE_IMPORTS": "tests.browser.workflows"},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    running = Studio(f"http://127.0.0.1:{port}", "admin", "", seeded, output, process)
    try:
        wait_until_up(running)
        credentials = re.search(r"sign in:\s+(\S+) / (\S+)", running.printed())
        assert credentials is not None, running.printed()
        running.user, running.password = credentials.groups()
        yield running
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    # A page or a poll that failed on the server (a 500 the browser only shows as a message)
    # or a worker that crashed leaves a traceback in the output: the tests did not see it all.
    assert "Traceback (most recent call last)" not in running.printed(), running.printed()


@pytest.fixture(scope="package")
def playwright() -> Iterator[Playwright]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("the playwright package is not installed (pip install -e '.[test]')")
    with sync_playwright() as running:
        yield running


@pytest.fixture(scope="package")
def browser(playwright: Playwright) -> Iterator[Browser]:
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        unavailable(f"no Chromium at {CHROMIUM} (scripts/test installs Debian's: apt-get install chromium)")
    launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    yield launched
    launched.close()


@pytest.fixture(scope="package")
def signed_in(browser: Browser, studio: Studio) -> dict[str, Any]:
    """The operator's session, signed in through the login page once: its storage state."""
    from playwright.sync_api import expect

    context = browser.new_context(base_url=studio.url)
    try:
        page = context.new_page()
        page.goto("/")
        expect(page).to_have_url(re.compile(r"/login"))
        page.get_by_label("Name").fill(studio.user)
        page.get_by_label("Password").fill(studio.password)
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_role("heading", name="Overview", level=1)).to_be_visible()
        return context.storage_state()  # type: ignore[return-value]
    finally:
        context.close()


def new_page(browser: Browser, studio: Studio, **options: Any) -> Iterator[Page]:
    """A tab in a context of its own: a laptop's viewport in light mode unless ``options``
    (Playwright's new_context arguments) say otherwise."""
    laptop = {"base_url": studio.url, "viewport": {"width": 1280, "height": 860}, "color_scheme": "light"}
    context = browser.new_context(**{**laptop, **options})
    context.set_default_timeout(TIMEOUT_MS)
    try:
        yield context.new_page()
    finally:
        context.close()


@pytest.fixture
def page(browser: Browser, studio: Studio, signed_in: dict[str, Any]) -> Iterator[Page]:
    """A new tab signed in as the operator, in light mode."""
    yield from new_page(browser, studio, storage_state=signed_in)


@pytest.fixture
def signed_out_page(browser: Browser, studio: Studio) -> Iterator[Page]:
    """A new tab with no session."""
    yield from new_page(browser, studio)
