"""Every page's header has a "Go to" form: an action's id (``42`` or ``#42``) opens its
page. An id that names no action is a 404 that says so, and text or an id out of range a
400 that says what to type; neither is ever a 500, nor is an out-of-range id in a page's
or a command's URL. The header also loads the script of the time toggle and shortcuts.

Not a spec case: the studio is ours (issue 12, "Fast navigation").
"""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session

import engine
from tests.domain import Car
from tests.studio.support import StudioClient, forms

TOO_BIG = str(2**63)


@pytest.mark.parametrize("path", ["/", "/actions/", "/lanes/", "/catalog/", "/audit/", "/achievements/"])
def test_every_page_has_the_jump_form_and_the_navigation_script(
    viewer_client: StudioClient, path: str
) -> None:
    page = viewer_client.get(path)
    assert page.status_code == 200
    jump = [f for f in forms(page.text) if f.action == "/actions/jump"]
    assert len(jump) == 1 and jump[0].method == "get" and "id" in jump[0].inputs
    assert '<script src="/static/navigation.js" defer></script>' in page.text


def test_an_id_opens_the_actions_page(viewer_client: StudioClient, session: Session, car: Car) -> None:
    engine.define(Car, "honk")
    action = engine.now(car, "honk")
    for typed in (str(action.id), f"#{action.id}", f"  # {action.id} "):
        answer = viewer_client.get("/actions/jump", query_string={"id": typed})
        assert answer.status_code == 303, typed
        assert answer.headers["Location"] == f"/actions/{action.id}"


@pytest.mark.parametrize(
    ("typed", "code", "message"),
    [
        ("4242", 404, "There is no action 4242: it may have been deleted, or the id is wrong."),
        ("car", 400, "Jump to an action by its id, a whole number like 42, not &#39;car&#39;."),
        ("-3", 400, "a whole number like 42, not &#39;-3&#39;."),
        ("", 400, "Type an action&#39;s id (a whole number like 42) to jump to its page."),
        ("0", 400, "An action id is a whole number from 1 to 9,223,372,036,854,775,807, not 0."),
        (TOO_BIG, 400, "An action id is a whole number from 1 to 9,223,372,036,854,775,807"),
        ("٣", 400, "a whole number like 42"),
    ],
)
def test_an_unknown_or_malformed_id_says_what_is_wrong(
    viewer_client: StudioClient, typed: str, code: int, message: str
) -> None:
    answer = viewer_client.get("/actions/jump", query_string={"id": typed})
    assert answer.status_code == code
    assert message in answer.text


def test_out_of_range_ids_in_page_and_command_urls_are_404s(operator_client: StudioClient) -> None:
    for path in (f"/actions/{TOO_BIG}", f"/actions/{TOO_BIG}/live", f"/actions/{TOO_BIG}?before={TOO_BIG}"):
        answer = operator_client.get(path)
        assert answer.status_code == 404, path
        assert f"There is no action {TOO_BIG}" in answer.text
    for verb in ("cancel", "retry", "skip", "approve", "reject"):
        answer = operator_client.command(f"/actions/{TOO_BIG}/{verb}")
        assert answer.status_code == 404, verb
        assert "nothing was changed" in answer.text
