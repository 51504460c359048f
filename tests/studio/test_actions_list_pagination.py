"""Given more actions than fit on a page, the actions list pages through them by keyset
(``WHERE id < :before ORDER BY id DESC LIMIT n``), newest first: following "Older →"
(rel="next") visits every action once, with no duplicates and no gaps, even when new
actions arrive meanwhile; "← Newer" (rel="prev") comes back; the filter stays on every
page; and no query skips rows with OFFSET or counts without a LIMIT, so the hundredth page
costs what the first does.

Not a spec case: the studio is ours (issue 4, "Actions list" and issue 5's page budget).
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator

import pytest
from flask import Flask
from sqlalchemy import event
from sqlalchemy.orm import Session

import engine
from app.actions import queries as queries_actions
from app.database import db
from engine import commands
from tests.domain import Car
from tests.studio.support import HTMX, StudioClient

PAGE = 4


@pytest.fixture(autouse=True)
def small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(queries_actions, "PAGE_SIZE", PAGE)


def ids_on(text: str) -> list[int]:
    return [int(n) for n in re.findall(r'<tr data-id="(\d+)"', text)]


def link(text: str, rel: str) -> str | None:
    found = re.search(rf'<a rel="{rel}" href="([^"]+)"', text)
    return html.unescape(found.group(1)) if found else None


def walk(client: StudioClient, url: str) -> list[list[int]]:
    """Follow rel="next" from ``url`` to the end: the ids of each page."""
    pages = []
    next_url: str | None = url
    while next_url is not None:
        answer = client.get(next_url)
        assert answer.status_code == 200, next_url
        pages.append(ids_on(answer.text))
        next_url = link(answer.text, "next")
        assert len(pages) < 50, "the pages never end"
    return pages


def drives(session: Session, car: Car, n: int, name: str = "drive") -> list[int]:
    return [engine.now(car, name, i).id for i in range(n)]


def test_following_older_visits_every_action_once_newest_first(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    # Given 10 actions and pages of 4
    made = drives(session, car, 10)

    pages = walk(viewer_client, "/actions/")

    # Then three pages, newest first, no duplicates and no gaps
    assert [len(p) for p in pages] == [4, 4, 2]
    listed = [i for p in pages for i in p]
    assert listed == sorted(made, reverse=True)
    # And the last page has no "Older" link
    last = viewer_client.get(f"/actions/?before={pages[1][-1]}")
    assert link(last.text, "next") is None
    assert "« Newest" in last.text


def test_the_older_link_carries_the_last_id_of_the_page_and_the_filter(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    # Given drives and honks interleaved
    engine.define(Car, "honk")
    for i in range(6):
        engine.now(car, "drive", i)
        engine.now(car, "honk")

    first = viewer_client.get("/actions/?name=drive")

    shown = ids_on(first.text)
    assert link(first.text, "next") == f"/actions/?name=drive&before={shown[-1]}"
    pages = walk(viewer_client, "/actions/?name=drive")
    expected = sorted(session.scalars(commands.ActionFilter(name="drive").select_ids()).all(), reverse=True)
    assert [i for p in pages for i in p] == expected


def test_actions_created_while_paging_neither_shift_nor_repeat_the_older_pages(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    made = drives(session, car, 8)
    first = viewer_client.get("/actions/")
    older = link(first.text, "next")
    assert older is not None

    # When new actions arrive before the operator clicks "Older"
    drives(session, car, 5)
    second = viewer_client.get(older)

    # Then the second page continues where the first stopped
    assert ids_on(first.text) + ids_on(second.text) == sorted(made, reverse=True)


def test_newer_comes_back_to_the_page_before(viewer_client: StudioClient, session: Session, car: Car) -> None:
    drives(session, car, 10)
    pages = walk(viewer_client, "/actions/")
    third = viewer_client.get(f"/actions/?before={pages[1][-1]}")

    newer = link(third.text, "prev")
    assert newer is not None
    back = viewer_client.get(newer)

    assert ids_on(back.text) == pages[1]
    again = link(back.text, "prev")
    assert again is not None
    assert ids_on(viewer_client.get(again).text) == pages[0]
    # The newest page has no "Newer" link
    assert link(viewer_client.get("/actions/").text, "prev") is None


def test_with_htmx_the_pager_swaps_only_the_list(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    drives(session, car, 6)
    first = viewer_client.get("/actions/")
    older = link(first.text, "next")
    assert older is not None
    assert re.search(r'rel="next" href="[^"]+" hx-get="[^"]+" hx-target="#actions-list"', first.text)

    fragment = viewer_client.get(older, headers=HTMX)

    assert fragment.text.lstrip().startswith('<section id="actions-list"')
    assert len(ids_on(fragment.text)) == 2
    assert fragment.headers["HX-Push-Url"] == older


@pytest.fixture
def statements(app: Flask) -> Iterator[list[str]]:
    """Every SQL statement the studio runs while the test requests pages. SQLite's compiler
    writes each LIMIT as ``LIMIT ? OFFSET ?`` (an offset of 0 when none is asked for): that
    OFFSET is left out, and PostgreSQL's run of the test checks that none is asked for."""
    seen: list[str] = []

    def record(conn: object, cursor: object, statement: str, *args: object) -> None:
        seen.append(" ".join(statement.split()).replace("LIMIT ? OFFSET ?", "LIMIT ?"))

    with app.app_context():
        sa_engine = db.engine
    event.listen(sa_engine, "before_cursor_execute", record)
    yield seen
    event.remove(sa_engine, "before_cursor_execute", record)


def test_pages_are_read_by_keyset_and_counts_are_bounded(
    viewer_client: StudioClient, session: Session, car: Car, statements: list[str]
) -> None:
    drives(session, car, 10)
    pages = walk(viewer_client, "/actions/?name=drive")
    assert len(pages) == 3

    reads = [s for s in statements if "stepwise_actions" in s]
    assert reads
    for statement in reads:
        assert "OFFSET" not in statement.upper(), statement
        if "count(" in statement.lower():
            # A capped count: it reads at most CAP + 1 rows of a limited subquery
            assert "LIMIT" in statement.upper(), statement
    keyset = [s for s in reads if "stepwise_actions.id <" in s and "ORDER BY stepwise_actions.id DESC" in s]
    assert len(keyset) == 2  # the second and the third page
