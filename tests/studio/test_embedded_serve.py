"""Given a machine with no services, ``stepwise serve --demo`` brings the studio up on a
SQLite file with the in-memory broker and an in-process worker: a first operator can sign
in at once, and demo workflows start and complete while they watch.

Not a spec case: the embedded default of issue 4 ("One command"). The command runs as a
subprocess on a free port with a temporary SQLite file and no broker URL, as the README's
run command does; it runs once, not once per backend.
"""

from __future__ import annotations

import http.cookiejar
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest

T = TypeVar("T")
#: The roots the demo's schedules start (app/demo/schedules.py), beside the workflows it seeds.
SCHEDULED = {"sync_stock", "nightly_digest"}


@pytest.fixture(autouse=True)
def database() -> Iterator[None]:
    """Overrides tests/conftest.py's fixture: the server brings its own database."""
    yield


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def eventually(check: Callable[[], T | None], seconds: float, what: str) -> T:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.25)
    raise AssertionError(f"after {seconds}s, still no {what}")


@dataclass
class Server:
    url: str
    database: Path
    output: Path
    process: subprocess.Popen[bytes]

    def printed(self) -> str:
        return self.output.read_text()

    def rows(self, sql: str) -> list[tuple[object, ...]]:
        with sqlite3.connect(f"file:{self.database}?mode=ro", uri=True, timeout=30) as connection:
            return connection.execute(sql).fetchall()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    port = free_port()
    database = tmp_path / "studio.db"
    output = tmp_path / "serve.out"
    environment = {
        k: v
        for k, v in os.environ.items()
        if k
        not in ("REDIS_URL", "RABBITMQ_URL", "DATABASE_URL", "STEPWISE_ENV", "SECRET_KEY", "STEPWISE_IMPORTS")
    }
    with output.open("wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "engine.cli",
                "serve",
                "--demo",
                "--port",
                str(port),
                "--database-url",
                f"sqlite:///{database}",
            ],
            cwd=tmp_path,
            env=environment,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    running = Server(f"http://127.0.0.1:{port}", database, output, process)
    try:
        yield running
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise AssertionError(f"stepwise serve did not stop on SIGTERM:\n{running.printed()}") from None


class Browser:
    """urllib with a cookie jar: enough of a browser for a server-rendered studio."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
        )

    def get(self, path: str) -> tuple[int, str]:
        try:
            with self.opener.open(self.base + path, timeout=10) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def post(self, path: str, form: dict[str, str]) -> tuple[int, str]:
        data = urllib.parse.urlencode(form).encode()
        try:
            with self.opener.open(self.base + path, data=data, timeout=10) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()


def csrf_token(html: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert found is not None, html
    return found.group(1)


def test_serve_demo_runs_the_studio_and_live_workflows_in_one_process(server: Server) -> None:
    # Given `stepwise serve --demo` on a fresh SQLite file, with no broker
    browser = Browser(server.url)

    def up() -> str | None:
        try:
            status, html = browser.get("/login")
        except OSError:
            return None
        return html if status == 200 else None

    login_page = eventually(up, 30, f"studio answering at {server.url}:\n{server.printed()}")

    # Then it printed how to sign in as the first operator, and where everything runs
    printed = server.printed()
    credentials = re.search(r"sign in:\s+admin / (\S+)", printed)
    assert credentials is not None, printed
    assert "in-memory broker" in printed
    assert f"database: sqlite:///{server.database}" in printed

    # When the operator signs in with them
    status, overview = browser.post(
        "/login", {"name": "admin", "password": credentials.group(1), "csrf_token": csrf_token(login_page)}
    )

    # Then the overview shows, and names the operator
    assert status == 200
    assert "Needs attention" in overview
    assert "admin" in overview and "role-admin" in overview

    # And demo workflows of the three kinds are started and performed by the in-process worker
    def started_and_finished() -> list[str] | None:
        names = {name for (name,) in server.rows("SELECT DISTINCT name FROM stepwise_actions WHERE root")}
        finished = server.rows("SELECT count(*) FROM stepwise_actions WHERE status = 'succeeded'")[0][0]
        # The demo's minutely schedule (sync_stock) also starts a root when a minute turns.
        seeded = {"deploy", "fulfil", "publish"} <= names and finished >= 3
        return sorted(names - SCHEDULED) if seeded else None

    assert eventually(started_and_finished, 45, f"demo workflows completing:\n{server.printed()}") == [
        "deploy",
        "fulfil",
        "publish",
    ]

    # And the overview's counts fragment shows them, once its cached window is computed again
    def counted() -> int | None:
        status, counts = browser.get("/overview/counts")
        assert status == 200
        succeeded = re.search(r'data-status="succeeded" data-count="(\d+)"', counts)
        return int(succeeded.group(1)) if succeeded is not None and int(succeeded.group(1)) >= 3 else None

    assert eventually(counted, 60, "the overview's counts to show the succeeded workflows") >= 3

    # And a form sent without its CSRF token is refused
    status, refused = browser.post("/logout", {})
    assert status == 400
    assert "nothing was changed" in refused
    assert server.process.poll() is None
