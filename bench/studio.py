"""Studio at scale: the server time of the operators' pages with a million actions.

    .venv/bin/python bench/studio.py [--rows 1000000] [--repeat 20] [--keep-database]
    .venv/bin/python bench/studio.py --database stepwise_studio_123_abcdef   # reuse a kept one

Seeds ``--rows`` completed actions in realistic trees (bench/seed.py: several action
names, 91% succeeded and the rest failed, cancelled, timed out or superseded, spread over
30 days), plus 1,000 lanes each with an outbound action awaiting approval and two queued
behind it, a tree of 1,000 nodes and achievements. Then builds the studio with Flask's test
client, signed in as an operator, and times each page ``--repeat`` times in this process
(server time: routing, queries and templates; no network). Prints p50 and p95 per page.

A page the studio does not have yet (404) is skipped with a note, and a placeholder page
("not built yet") is timed but marked. The URLs are in ``PAGES`` below.

``--keep-database`` keeps the seeded database (its name is printed), and ``--database NAME``
times the pages on a database kept that way, without seeding (minutes) and without dropping
it: to compare a change before and after on the same rows. Its seeded times move further
into the past as it ages (the overview's windows hold fewer of them).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg

from bench import common, seed
from bench.common import say
from bench.figures import percentile, table

PLACEHOLDER = "This page is not built yet."
#: The link to the next page of a list: ``<a rel="next" href="…">`` (either attribute order).
NEXT_LINK = re.compile(
    r"<a\b[^>]*?\brel=\"next\"[^>]*?\bhref=\"([^\"]+)\"|<a\b[^>]*?\bhref=\"([^\"]+)\"[^>]*?\brel=\"next\""
)
TARGETS = {"tree": 300.0}  # ms, p95; every other page: 150 ms


@dataclass
class Page:
    label: str
    #: The URL, or a function of the client and the seeded ids that finds it (None: missing).
    url: str | Callable[[Any, dict[str, int]], str | None]


def nth_page(n: int, first: str = "/actions/") -> Callable[[Any, dict[str, int]], str | None]:
    """The URL of the ``n``-th page of a list, following its ``rel="next"`` links."""

    def find(client: Any, ids: dict[str, int]) -> str | None:
        url: str | None = first
        for _ in range(n - 1):
            assert url is not None
            response = client.get(url)
            match = NEXT_LINK.search(response.get_data(as_text=True)) if response.status_code == 200 else None
            if match is None:
                return None
            url = unquote((match.group(1) or match.group(2)).replace("&amp;", "&"))
        return url

    return find


PAGES = [
    Page("overview", "/"),
    Page("overview, a week's window", "/?window=7d"),
    Page("failures by error", "/actions/errors"),
    Page("actions, one error class", "/actions/?status=failed&error=builtins.RuntimeError"),
    Page("actions, status=failed", "/actions/?status=failed"),
    Page("actions, name=charge", "/actions/?name=charge"),
    Page("actions, page 1", "/actions/"),
    Page("actions, page 2", nth_page(2)),
    Page("actions, page 100", nth_page(100)),
    Page("tree of 1,000 nodes", lambda client, ids: f"/actions/{ids['big_tree']}"),
    Page("lanes", "/lanes/"),
    Page("achievements search", lambda client, ids: f"/achievements/?q=Tree/{ids['achievement_actor']}"),
]


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--rows", type=int, default=1_000_000, help="completed actions seeded (default 1000000)"
    )
    parser.add_argument("--repeat", type=int, default=20, help="timed requests per page (default 20)")
    parser.add_argument("--keep-database", action="store_true", help="keep the seeded database afterwards")
    parser.add_argument(
        "--database",
        metavar="NAME",
        help="time the pages on this database, kept by an earlier --keep-database run (no seeding, kept)",
    )
    return parser.parse_args(argv)


def seeded_ids(database_url: str) -> dict[str, int]:
    with psycopg.connect(database_url, autocommit=True) as connection:
        big = connection.execute("SELECT id FROM stepwise_actions WHERE root AND name = 'rollout'").fetchone()
        achievement = connection.execute(
            "SELECT a.actor_id FROM stepwise_achievements x JOIN stepwise_actions a ON a.id = x.action_id "
            "ORDER BY x.id DESC LIMIT 1"
        ).fetchone()
    return {
        "big_tree": int(big[0]) if big else 0,
        "achievement_actor": int(achievement[0]) if achievement else 0,
    }


def studio(database_url: str) -> tuple[Any, Any]:
    """The studio on the seeded database and a test client signed in as an operator."""
    from app import create_app
    from app.database import db
    from app.security import users

    app = create_app(
        {
            "TESTING": True,
            "SECRET_KEY": "bench-secret-key",
            "DATABASE_URL": database_url,
            "STEPWISE_IMPORTS": "bench.workload",
        }
    )
    with app.app_context():
        db.create_all()
        user = users.find("olga") or users.create("olga", "bench password, not secret", users.OPERATOR)
        user_id = user.id
    client = app.test_client()
    # Signed in as the login view does it: the user's id in the signed session cookie.
    with client.session_transaction() as session:
        session["user_id"] = user_id
    return app, client


def time_page(client: Any, url: str, repeat: int) -> tuple[list[float], int, bool]:
    """Milliseconds per request (after one untimed request), the status, and whether the
    page is a placeholder."""
    response = client.get(url)
    placeholder = PLACEHOLDER in response.get_data(as_text=True)
    timings = []
    for _ in range(repeat):
        started = time.perf_counter()
        response = client.get(url)
        response.get_data()
        timings.append((time.perf_counter() - started) * 1000)
    return timings, response.status_code, placeholder


@contextmanager
def database(args: argparse.Namespace) -> Iterator[str]:
    """The URL of the database to time: a fresh one (seeded by the caller), or ``--database``."""
    if args.database:
        say(f"database {args.database} (reused, not seeded, kept)")
        yield common.url_of(args.database)
        return
    with common.fresh_database("stepwise_studio", keep=args.keep_database) as url:
        yield url


def main(argv: list[str] | None = None) -> None:
    args = arguments(argv)
    try:
        from app import create_app  # noqa: F401
    except ImportError:
        print("studio benchmark needs the studio (issue 4)")
        return
    say(common.machine())
    rows: list[tuple[str, ...]] = []
    summary = f"reused database {args.database} (seeded by an earlier run)"
    with database(args) as database_url:
        if not args.database:
            common.create_schema(database_url)
            summary = seed.seed(database_url, args.rows, names=seed.STUDIO_NAMES, live=True).summary()
        ids = seeded_ids(database_url)
        app, client = studio(database_url)
        try:
            for page in PAGES:
                url = page.url if isinstance(page.url, str) else page.url(client, ids)
                if url is None:
                    rows.append((page.label, "-", "-", 'skipped: no rel="next" link to follow'))
                    continue
                timings, status_code, placeholder = time_page(client, url, args.repeat)
                if status_code == 404:
                    rows.append((page.label, "-", "-", f"skipped: {url} is not in the studio yet (404)"))
                    continue
                target = TARGETS.get("tree" if "tree" in page.label else "", 150.0)
                p95 = percentile(timings, 95)
                verdict = "" if p95 < target else f"over the {target:.0f} ms target"
                note = f"{url} -> {status_code}" + (" PLACEHOLDER" if placeholder else "") + f" {verdict}"
                rows.append((page.label, f"{percentile(timings, 50):.1f}", f"{p95:.1f}", note.rstrip()))
        finally:
            with app.app_context():
                from app.database import db

                db.session.remove()
                db.engine.dispose()
    on = args.database or f"{args.rows} seeded actions"
    table(
        f"Studio: server time per page with {on}, {args.repeat} requests each ({common.machine()})",
        rows,
        header=("page", "p50 ms", "p95 ms", "URL -> status"),
        values=2,
    )
    print(f"\n{summary}")
    print("targets: p95 < 150 ms per page, < 300 ms for the 1,000-node tree; page 100 as fast as page 1")


if __name__ == "__main__":
    main()
