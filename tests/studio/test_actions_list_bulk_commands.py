"""Given a filtered actions list, an operator cancels or retries every matching action in
two steps: a confirmation that shows the filter and how many actions the command would
change (a capped count, said so), then a POST (with the CSRF token) that runs
engine.commands.bulk in a background thread, answered with a progress fragment that polls
its audit entry until the command is finished. One audit entry per bulk command. Viewers,
requests without the token and invalid filters change nothing.

Not a spec case: the studio is ours (issue 4, "Commands": bulk cancel or retry).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from flask import Flask
from sqlalchemy import func, select
from sqlalchemy.orm import Session

import engine
from app import queries
from app.security import csrf
from engine import bulk_work, commands, testing
from engine.audit import AuditEntry
from engine.models import Action
from tests.domain import Car
from tests.studio.support import HTMX, StudioClient, forms


def order_paint(car: Car, *colors: str) -> None:
    """The paint shop is asked; it completes the action from outside."""


@pytest.fixture
def paint_jobs(session: Session, car: Car) -> list[Action]:
    """Three outbound paint jobs on three cars, waiting for the paint shop (performing), and
    a fourth queued behind the first in its car's lane (pending); a drive that succeeded."""
    engine.define(Car, "paint", order_paint, outbound=True)
    cars = [car, Car(), Car()]
    session.add_all(cars[1:])
    session.commit()
    jobs = [engine.now(c, "paint", color) for c, color in zip(cars, ("red", "green", "blue"), strict=True)]
    jobs.append(engine.now(car, "paint", "black"))
    engine.now(car, "drive", 5)
    return jobs


def statuses(session: Session, name: str = "paint") -> list[str]:
    session.expire_all()
    return list(session.scalars(select(Action.status).where(Action.name == name).order_by(Action.id)))


def audit_entries(session: Session) -> list[AuditEntry]:
    session.expire_all()
    return list(session.scalars(select(AuditEntry).order_by(AuditEntry.id)))


def words(text: str) -> str:
    """The text with its runs of white space as single spaces (the templates wrap lines)."""
    return " ".join(text.split())


def run_bulk_jobs() -> None:
    """The workers take the bulk runs (here: the stub broker's messages of that job only)."""
    testing.drain(only=lambda item: item.job == bulk_work.BULK_RUN)


def entry_id_in(text: str) -> int:
    found = re.search(r'id="bulk-progress-(\d+)"', text)
    assert found is not None, text
    return int(found.group(1))


def test_operators_see_the_bulk_commands_for_the_current_filter(
    operator_client: StudioClient, viewer_client: StudioClient, paint_jobs: list[Action]
) -> None:
    page = operator_client.get("/actions/?name=paint&status=performing")
    every = operator_client.get("/actions/?name=paint")

    assert 'href="/actions/bulk/confirm?verb=cancel&amp;status=performing&amp;name=paint"' in page.text
    assert 'hx-target="#bulk-panel"' in page.text
    # Only the verbs that apply to the filter: performing actions cannot be retried
    assert "verb=retry" not in page.text
    assert 'href="/actions/bulk/confirm?verb=retry&amp;name=paint"' in every.text
    # A viewer sees the list but no command
    seen = viewer_client.get("/actions/?name=paint&status=performing")
    assert seen.status_code == 200
    assert "/actions/bulk/confirm" not in seen.text


def test_the_confirmation_shows_the_filter_and_how_many_actions_would_change(
    operator_client: StudioClient, paint_jobs: list[Action]
) -> None:
    page = operator_client.get("/actions/bulk/confirm?verb=cancel&name=paint")
    fragment = operator_client.get("/actions/bulk/confirm?verb=cancel&name=paint", headers=HTMX)

    assert page.status_code == fragment.status_code == 200
    assert fragment.text.lstrip().startswith('<section id="bulk-confirm"')
    for answer in (page, fragment):
        assert 'data-eligible="4" data-capped="false"' in answer.text
        assert "of the 4 matching actions are pending or performing and will be cancelled" in words(
            answer.text
        )
        assert "<dt>action name</dt><dd><code>paint</code></dd>" in answer.text
        # The form posts the filter and the verb, with the CSRF token
        (form,) = [f for f in forms(answer.text) if f.action == "/actions/bulk"]
        assert form.method == "post"
        assert form.inputs["verb"] == "cancel"
        assert form.inputs["name"] == "paint"
        assert form.inputs[csrf.FIELD] == operator_client.csrf_token()
        assert form.attributes["hx-target"] == "#bulk-confirm"
        assert "Cancel 4 actions" in answer.text


def test_the_confirmation_counts_only_what_the_command_can_change(
    operator_client: StudioClient, paint_jobs: list[Action], session: Session
) -> None:
    # Given one paint job failed (rejected by the shop): retry can reopen only that one
    commands.reject(paint_jobs[1].id, by="olga")

    retry = operator_client.get("/actions/bulk/confirm?verb=retry&name=paint")
    nothing = operator_client.get("/actions/bulk/confirm?verb=retry&name=drive")

    assert 'data-eligible="1"' in retry.text
    assert "failed, timed out or cancelled and will be retried" in words(retry.text)
    assert 'data-eligible="0"' in nothing.text
    assert "there is nothing to retry" in words(nothing.text)
    assert not [f for f in forms(nothing.text) if f.action == "/actions/bulk"]


def test_a_capped_count_says_that_it_is_capped(
    operator_client: StudioClient, paint_jobs: list[Action], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(queries, "CAP", 2)

    page = operator_client.get("/actions/bulk/confirm?verb=cancel&name=paint")

    assert 'data-eligible="2" data-capped="true"' in page.text
    assert "2+" in page.text
    assert "Counts stop at 2:" in page.text
    assert "the command acts on every matching action, however many there are" in words(page.text)
    assert "Cancel all of them" in page.text


def test_cancel_all_matching_runs_in_the_background_and_reports_its_progress(
    app: Flask, operator_client: StudioClient, paint_jobs: list[Action], session: Session
) -> None:
    # When the operator confirms the bulk cancel of the paint jobs, as htmx
    answer = operator_client.command(
        "/actions/bulk", {"verb": "cancel", "name": "paint", "reason": "shop closed"}
    )

    # Then the answer is the progress fragment of the command's audit entry
    assert answer.status_code == 200
    entry_id = entry_id_in(answer.text)
    assert 'data-total="4"' in answer.text
    assert "Bulk cancel started: 4 matching actions" in answer.text  # the message, out of band
    run_bulk_jobs()
    # And every paint job is cancelled; the drive is untouched
    assert statuses(session) == ["cancelled"] * 4
    assert statuses(session, "drive") == ["succeeded"]
    # And one audit entry records who, what, why and the progress
    (entry,) = audit_entries(session)
    assert entry.id == entry_id
    assert (entry.command, entry.by, entry.reason, entry.cause) == (
        "bulk_cancel",
        "olga",
        "shop closed",
        "operator",
    )
    assert (entry.total, entry.done, entry.result) == (4, 4, "done")
    assert entry.finished_at is not None
    assert entry.data["filter"] == {"name": "paint"}
    # And the progress fragment, once finished, stops polling
    progress = operator_client.get(f"/actions/bulk/{entry_id}", headers=HTMX)
    assert progress.text.lstrip().startswith(f'<section id="bulk-progress-{entry_id}"')
    assert 'data-finished="true"' in progress.text
    assert "hx-get" not in progress.text
    assert 'data-done="4"' in progress.text
    assert "Finished" in progress.text
    assert 'href="/actions/?name=paint"' in progress.text


def test_a_bulk_command_acts_on_exactly_what_the_filter_lists(
    app: Flask, operator_client: StudioClient, paint_jobs: list[Action], session: Session
) -> None:
    listed = operator_client.get("/actions/?name=paint&status=pending")
    assert re.findall(r'<tr data-id="(\d+)"', listed.text) == [str(paint_jobs[3].id)]

    operator_client.command("/actions/bulk", {"verb": "cancel", "name": "paint", "status": "pending"})
    run_bulk_jobs()

    assert statuses(session) == ["performing", "performing", "performing", "cancelled"]


def test_retry_all_matching_reopens_the_failed_ones(
    app: Flask, operator_client: StudioClient, session: Session, car: Car
) -> None:
    # Given two breakdowns that failed and one paint job waiting
    engine.define(Car, "breakdown")
    engine.define(Car, "paint", order_paint, outbound=True)
    other = Car()
    session.add(other)
    session.commit()
    with testing.handle_exceptions():
        engine.now(car, "breakdown")
        engine.now(other, "breakdown")
    engine.now(car, "paint", "red")
    assert statuses(session, "breakdown") == ["failed", "failed"]

    answer = operator_client.command("/actions/bulk", {"verb": "retry", "status": "failed"})
    entry_id_in(answer.text)
    run_bulk_jobs()

    # Then both are back in their lanes (the workers will run them again); the paint job is untouched
    assert set(statuses(session, "breakdown")) <= {"pending", "performing"}
    assert statuses(session) == ["performing"]
    (entry,) = audit_entries(session)
    assert (entry.command, entry.total, entry.done) == ("bulk_retry", 2, 2)
    # Failures are acted on by their roots (a retried root reopens its tree): said in the audit
    assert entry.data["filter"] == {"status": "failed", "roots_only": True}


def test_the_progress_fragment_polls_while_the_command_runs(
    app: Flask,
    operator_client: StudioClient,
    paint_jobs: list[Action],
    session: Session,
) -> None:
    answer = operator_client.command("/actions/bulk", {"verb": "cancel", "name": "paint"})
    entry_id = entry_id_in(answer.text)
    # Until a worker has taken it, the fragment polls itself every second while the tab is visible
    running = operator_client.get(f"/actions/bulk/{entry_id}", headers=HTMX)
    assert 'data-finished="false"' in running.text
    assert f'hx-get="/actions/bulk/{entry_id}"' in running.text
    assert "hx-trigger=\"every 1s, stepwise:visible\"" in running.text
    assert 'data-done="0"' in running.text and 'data-total="4"' in running.text
    assert "Running in a worker…" in running.text
    # And without JavaScript the page reloads itself
    page = operator_client.get(f"/actions/bulk/{entry_id}")
    assert '<noscript><meta http-equiv="refresh" content="2"></noscript>' in page.text
    run_bulk_jobs()
    finished = operator_client.get(f"/actions/bulk/{entry_id}")
    assert 'data-finished="true"' in finished.text
    assert "http-equiv" not in finished.text
    assert len(audit_entries(session)) == 1


def test_without_javascript_the_confirmation_redirects_to_the_progress_page(
    app: Flask, operator_client: StudioClient, paint_jobs: list[Action], session: Session
) -> None:
    answer = operator_client.command("/actions/bulk", {"verb": "cancel", "name": "paint"}, htmx=False)

    assert answer.status_code == 303
    (entry,) = audit_entries(session)
    assert answer.headers["Location"] == f"/actions/bulk/{entry.id}"
    run_bulk_jobs()
    page = operator_client.get(answer.headers["Location"])
    assert page.status_code == 200
    assert "Bulk cancel started: 4 matching actions" in page.text  # the flashed message
    assert 'data-done="4"' in page.text


def test_an_error_stops_the_progress_and_says_why(
    app: Flask,
    operator_client: StudioClient,
    paint_jobs: list[Action],
    session: Session,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*args: Any, **kwargs: Any) -> int:
        raise RuntimeError("the database went away")

    monkeypatch.setattr(bulk_work, "apply", broken)
    answer = operator_client.command("/actions/bulk", {"verb": "cancel", "name": "paint"})
    entry_id = entry_id_in(answer.text)
    run_bulk_jobs()

    progress = operator_client.get(f"/actions/bulk/{entry_id}", headers=HTMX)
    assert "It stopped on an error: RuntimeError: the database went away" in progress.text
    assert 'data-finished="true"' in progress.text
    assert "hx-get" not in progress.text


def test_a_viewer_can_neither_confirm_nor_run_a_bulk_command(
    viewer_client: StudioClient, paint_jobs: list[Action], session: Session
) -> None:
    confirm = viewer_client.get("/actions/bulk/confirm?verb=cancel&name=paint")
    run = viewer_client.command("/actions/bulk", {"verb": "cancel", "name": "paint"})
    plain = viewer_client.command("/actions/bulk", {"verb": "cancel", "name": "paint"}, htmx=False)

    assert confirm.status_code == run.status_code == plain.status_code == 403
    assert "Only an operator may do this" in plain.text
    assert statuses(session) == ["performing", "performing", "performing", "pending"]
    assert audit_entries(session) == []


@pytest.mark.parametrize("sent", [None, "forged-token"], ids=["missing", "wrong"])
def test_a_bulk_command_without_the_csrf_token_changes_nothing(
    operator_client: StudioClient, paint_jobs: list[Action], session: Session, sent: str | None
) -> None:
    data = {"verb": "cancel", "name": "paint", **({csrf.FIELD: sent} if sent else {})}

    for headers in ({}, HTMX):
        answer = operator_client.post("/actions/bulk", data=data, headers=headers)
        assert answer.status_code == 400
        assert "nothing was changed" in answer.text

    assert statuses(session) == ["performing", "performing", "performing", "pending"]
    assert audit_entries(session) == []


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"verb": "delete", "name": "paint"}, "A bulk command is cancel or retry"),
        ({"name": "paint"}, "A bulk command is cancel or retry"),
        ({"verb": "cancel", "status": "lost"}, "The filter is not valid, so nothing was changed"),
        ({"verb": "cancel", "created_before": "soon"}, "The filter is not valid, so nothing was changed"),
    ],
    ids=["unknown-verb", "no-verb", "bad-status", "bad-time"],
)
def test_a_bulk_command_with_an_invalid_filter_or_verb_changes_nothing(
    operator_client: StudioClient,
    paint_jobs: list[Action],
    session: Session,
    data: dict[str, str],
    message: str,
) -> None:
    answer = operator_client.command("/actions/bulk", data)
    confirm = operator_client.get("/actions/bulk/confirm", query_string=data)

    assert answer.status_code == confirm.status_code == 400
    assert message in answer.text
    assert message in confirm.text
    assert statuses(session) == ["performing", "performing", "performing", "pending"]
    assert audit_entries(session) == []


def test_the_progress_of_an_unknown_bulk_command_is_not_found(
    viewer_client: StudioClient, paint_jobs: list[Action], session: Session
) -> None:
    # An audit entry of another command is not a bulk command's
    commands.cancel(paint_jobs[0].id, by="olga")
    (entry,) = audit_entries(session)

    assert viewer_client.get(f"/actions/bulk/{entry.id}").status_code == 404
    assert viewer_client.get("/actions/bulk/999999").status_code == 404


def test_viewers_may_watch_a_bulk_commands_progress(
    app: Flask,
    operator_client: StudioClient,
    viewer_client: StudioClient,
    paint_jobs: list[Action],
    session: Session,
) -> None:
    answer = operator_client.command("/actions/bulk", {"verb": "cancel", "name": "paint"})
    entry_id = entry_id_in(answer.text)
    run_bulk_jobs()

    page = viewer_client.get(f"/actions/bulk/{entry_id}")

    assert page.status_code == 200
    assert "Started by olga" in page.text
    assert session.scalar(select(func.count()).select_from(AuditEntry)) == 1
