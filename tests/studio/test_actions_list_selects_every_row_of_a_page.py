"""Given a page of the actions list, the header's "select all" box names exactly the rows of
that page (the boxes it ticks), is labelled for screen readers, and is rendered hidden until
static/selection.js (a static file: the Content-Security-Policy forbids inline script)
shows it; viewers, who have no checkboxes, have no "select all" either. The browser test
(tests/browser/test_selecting_every_row_of_a_page.py) ticks it and retries the selection.

Not a spec case: the studio is ours (issue 12, "Act on what you select").
"""

from __future__ import annotations

import re

import engine
from app.actions import queries as actions_queries
from engine import testing
from tests.domain import Car
from tests.studio.support import HTMX, StudioClient

SELECT_ALL = re.compile(r'<input type="checkbox" id="select-all" data-select-all ([^>]*)>')


def paint(car: Car, color: str) -> None:
    raise RuntimeError(f"no {color} paint")


def given_failed_paint_jobs(car: Car, n: int) -> list[int]:
    engine.define(Car, "paint", paint)
    with testing.handle_exceptions():
        return [engine.now(car, "paint", f"color-{i}").id for i in range(n)]


def select_all_in(text: str) -> str:
    found = SELECT_ALL.search(text)
    assert found is not None, text
    return found.group(1)


def test_select_all_names_the_rows_of_its_page_and_no_other(operator_client: StudioClient, car: Car) -> None:
    # Given two more failed actions than a page holds
    failed = given_failed_paint_jobs(car, actions_queries.PAGE_SIZE + 2)
    newest_page = failed[:1:-1]  # newest first, the two oldest on the next page

    # When the operator lists them, then goes to the next page (as htmx does)
    first = operator_client.get("/actions/?status=failed&name=paint")
    older = re.search(r'<a rel="next" href="([^"]+)"', first.text)
    assert older is not None
    second = operator_client.get(older.group(1).replace("&amp;", "&"), headers=HTMX)

    # Then the first page's box controls its 50 rows' boxes, labelled for a screen reader
    attributes = select_all_in(first.text)
    assert f'aria-controls="{" ".join(f"select-{i}" for i in newest_page)}"' in attributes
    assert f'aria-label="Select all {actions_queries.PAGE_SIZE} actions on this page"' in attributes
    # and it waits, hidden, for the script that makes it work (a plain file, not inline)
    assert attributes.endswith("hidden")
    assert '<script src="/static/selection.js" defer></script>' in first.text
    # And the next page's box controls only the two rows listed there
    attributes = select_all_in(second.text)
    assert f'aria-controls="select-{failed[1]} select-{failed[0]}"' in attributes
    assert 'aria-label="Select all 2 actions on this page"' in attributes


def test_a_page_of_one_row_says_so_and_viewers_have_no_select_all(
    operator_client: StudioClient, viewer_client: StudioClient, car: Car
) -> None:
    (only,) = given_failed_paint_jobs(car, 1)

    page = operator_client.get("/actions/?status=failed&name=paint")
    seen = viewer_client.get("/actions/?status=failed&name=paint")

    assert 'aria-label="Select the 1 action on this page"' in select_all_in(page.text)
    assert f'aria-controls="select-{only}"' in select_all_in(page.text)
    assert f'href="/actions/{only}"' in seen.text
    assert "data-select-all" not in seen.text
