"""Given operator commands and webhook completions, the audit page lists every one, newest
first: who, when, what (linked), why and how it ended, with a bulk command's progress; a
page at a time, filtered by command and by user in the URL. A bulk command still running
refreshes its row until it is finished.

Not a spec case: the studio is ours (issue 4, "Audit").
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
from sqlalchemy.orm import Session

import engine
from app.audit import queries as queries_audit
from engine import audit, commands, history, testing
from engine.commands import ActionFilter
from tests.domain import Car
from tests.studio.support import HTMX, StudioClient

T = datetime(2025, 1, 2, 3, 4, 5)


@pytest.fixture(autouse=True)
def frozen() -> Iterator[None]:
    testing.freeze(T)
    yield


def order_paint(car: Car, color: str) -> None:
    """The paint shop is asked; it completes the action from outside."""


def listed(html: str) -> list[tuple[str, str]]:
    """(entry id, command) of each row, in order."""
    return re.findall(r'<tr id="audit-(\d+)" class="audit-entry [^"]*" data-command="(\w+)"', html)


def given_three_commands(session: Session, car: Car) -> tuple[int, int]:
    """olga cancels a paint; the paint shop's webhook completes another; then olga forgets
    an achievement. A minute apart."""
    engine.define(
        Car, "paint", order_paint, outbound=True, concurrency_key=lambda car, color: f"paint/{color}"
    )
    red = engine.now(car, "paint", "red")
    blue = engine.now(car, "paint", "blue")
    assert commands.cancel(red.id, by="olga", reason="wrong colour")
    testing.travel(timedelta(minutes=1))
    assert commands.complete(blue.id, by="paint-shop", note="dry", cause=history.WEBHOOK)
    testing.travel(timedelta(minutes=1))
    commands.forget(f"Car/{car.id}/visit", by="olga")
    return red.id, blue.id


def test_every_command_is_listed_newest_first_with_who_when_what_and_why(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    # Given three commands
    red, blue = given_three_commands(session, car)

    # When a viewer opens the audit
    page = viewer_client.get("/audit/")

    # Then they are listed newest first
    assert page.status_code == 200
    assert [command for _, command in listed(page.text)] == ["forget", "complete", "cancel"]
    rows = page.text.split('<tr id="audit-')[1:]
    forget, complete, cancel = rows
    # And each says who, when, what and why, and how it ended
    assert "olga" in cancel and '<span class="badge cause">operator</span>' in cancel
    assert "2025-01-02 03:04:05" in cancel
    assert f'<a href="/actions/{red}">action #{red}</a>' in cancel
    assert "<td>wrong colour</td>" in cancel
    assert 'class="result result-cancelled">cancelled<' in cancel
    assert "paint-shop" in complete and '<span class="badge cause">webhook</span>' in complete
    assert f'<a href="/actions/{blue}">action #{blue}</a>' in complete
    assert "<td>dry</td>" in complete
    assert 'status: <span class="mono">succeeded</span>' in complete
    assert f'href="/achievements/key?key=Car/{car.id}/visit"' in forget
    assert "not found" in forget
    # And no row polls: nothing is running
    assert "hx-get" not in page.text


def test_the_audit_is_filtered_by_command_and_by_user_in_the_url(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    given_three_commands(session, car)

    def commands_on(url: str) -> list[str]:
        return [command for _, command in listed(viewer_client.get(url).text)]

    assert commands_on("/audit/?command=cancel") == ["cancel"]
    assert commands_on("/audit/?by=olga") == ["forget", "cancel"]
    assert commands_on("/audit/?by=paint-shop&command=complete") == ["complete"]
    assert commands_on("/audit/?by=olga&command=complete") == []
    page = viewer_client.get("/audit/?command=retry&by=olga")
    assert "No command retry by olga has been recorded." in page.text
    assert '<option value="retry" selected>' in page.text
    assert 'id="audit-by" name="by" value="olga"' in page.text


def test_the_audit_comes_a_page_at_a_time_newest_first(
    viewer_client: StudioClient, session: Session, car: Car, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given three commands, and pages of two
    given_three_commands(session, car)
    monkeypatch.setattr(queries_audit, "PAGE", 2)

    # When a viewer reads the first page and follows its link to older entries
    first = viewer_client.get("/audit/?by=olga")
    assert [c for _, c in listed(first.text)] == ["forget", "cancel"]
    everyone = viewer_client.get("/audit/")
    ids = [int(i) for i, _ in listed(everyone.text)]
    assert len(ids) == 2
    link = re.search(r'rel="next" href="([^"]+)"', everyone.text)
    assert link is not None
    assert link.group(1) == f"/audit/?before={ids[-1]}"

    # Then the next page holds the oldest entry, and links back to the newest
    older = viewer_client.get(link.group(1))
    assert [c for _, c in listed(older.text)] == ["cancel"]
    assert 'rel="next"' not in older.text
    assert 'href="/audit/">« Newest' in older.text


def test_a_bulk_command_shows_its_progress_and_its_row_polls_until_finished(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    # Given a finished bulk cancel of two paints
    engine.define(
        Car, "paint", order_paint, outbound=True, concurrency_key=lambda car, color: f"paint/{color}"
    )
    engine.now(car, "paint", "red")
    engine.now(car, "paint", "blue")
    done = commands.bulk("cancel", ActionFilter(name="paint"), by="olga", reason="shop closed")
    # And a bulk retry still running: 1 of 4 done
    running = audit.record(
        session, "bulk_retry", "filter", cause="operator", by="olga", filter={"status": "failed"}
    )
    running.total, running.done = 4, 1
    session.commit()

    # When a viewer opens the audit
    page = viewer_client.get("/audit/")

    # Then the finished one shows its progress and its filter, and does not poll
    finished_row = page.text.split(f'<tr id="audit-{done.id}"', 1)[1].split("</tr>", 1)[0]
    assert '<progress max="2" value="2"' in finished_row
    assert "2 of 2" in finished_row
    assert 'filter: <span class="mono">{"name": "paint"}</span>' in finished_row
    assert "hx-get" not in finished_row.split(">", 1)[0]
    # And the running one polls its own row while the tab is visible
    running_row = page.text.split(f'<tr id="audit-{running.id}"', 1)[1].split("</tr>", 1)[0]
    assert f'hx-get="/audit/{running.id}"' in running_row
    assert "1 of 4" in running_row

    # When it finishes, its row stops polling
    running.done, running.finished_at, running.result = 4, T, "done"
    session.commit()
    row = viewer_client.get(f"/audit/{running.id}", headers=HTMX)
    assert row.text.lstrip().startswith(f'<tr id="audit-{running.id}"')
    assert "hx-get" not in row.text
    assert "4 of 4" in row.text


def test_an_unknown_entry_is_not_found_and_the_audit_needs_a_signed_in_user(
    viewer_client: StudioClient, client: StudioClient
) -> None:
    assert viewer_client.get("/audit/999").status_code == 404
    assert client.get("/audit/").status_code == 302


def test_forgetting_the_longest_key_the_form_takes_is_audited_and_listed_whole(
    operator_client: StudioClient, viewer_client: StudioClient
) -> None:
    # Given the longest key the achievements form accepts: "achievement:" + it is longer
    # than the audit's target column (PostgreSQL refused the entry, and the command with it)
    key = "Car/1/visit/" + "x" * 488

    # When an operator forgets it (there is no such achievement)
    answer = operator_client.command("/achievements/forget", {"checksum_key": key})

    # Then the command answers as for any key it does not find
    assert answer.status_code == 409
    assert f"No achievement under {key}" in answer.text
    # And the audit lists the entry: the target cut with an ellipsis, linked and listed whole
    (row,) = viewer_client.get("/audit/").text.split('<tr id="audit-')[1:]
    shown = f"achievement:{key}"[: audit.TARGET_LENGTH - 1].partition(":")[2] + "…"
    assert f'href="/achievements/key?key={key}">{shown}</a>' in row
    assert f'target: <span class="mono">achievement:{key}</span>' in row
