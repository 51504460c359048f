"""Given a list of actions, an operator ticks rows and retries or cancels the selected ones:
the same two steps as "all matching" (a confirmation that counts what the command would
change, then a POST with the CSRF token answered by the progress of one audit entry), acting
on exactly the ticked ids. Only the verbs that apply to the filter are offered, for the
selection as for "all matching"; viewers see no checkbox; bad or too many ids are refused.

Not a spec case: the studio is ours (issue 12, "Act on what you select").
"""

from __future__ import annotations

import re

from flask import Flask
from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from app.actions import filters as action_filters
from engine import bulk_work, testing
from engine.audit import AuditEntry
from engine.models import Action
from tests.domain import Car
from tests.studio.support import HTMX, StudioClient, forms


def paint(car: Car, color: str) -> None:
    raise RuntimeError(f"no {color} paint")


def words(text: str) -> str:
    return " ".join(text.split())


def statuses(session: Session, ids: list[int]) -> list[str]:
    session.expire_all()
    found = dict(session.execute(select(Action.id, Action.status).where(Action.id.in_(ids))).all())
    return [found[i] for i in ids]


def run_bulk_jobs() -> None:
    """The workers take the bulk runs (here: the stub broker's messages of that job only)."""
    testing.drain(only=lambda item: item.job == bulk_work.BULK_RUN)


def entry_id_in(text: str) -> int:
    found = re.search(r'id="bulk-progress-(\d+)"', text)
    assert found is not None, text
    return int(found.group(1))


def given_failed_paint_jobs(car: Car, n: int = 3) -> list[int]:
    engine.define(Car, "paint", paint)
    with testing.handle_exceptions():
        return [engine.now(car, "paint", f"color-{i}").id for i in range(n)]


def test_operators_tick_rows_and_choose_a_verb_for_the_selection(
    operator_client: StudioClient, viewer_client: StudioClient, session: Session, car: Car
) -> None:
    failed = given_failed_paint_jobs(car)

    page = operator_client.get("/actions/?status=failed")

    # A checkbox per row, in the selection form that asks for the confirmation
    (form,) = [f for f in forms(page.text) if f.attributes.get("id") == "selection"]
    assert (form.method, form.action) == ("get", "/actions/bulk/confirm")
    assert form.attributes["hx-target"] == "#bulk-panel"
    for action_id in failed:
        assert f'<input type="checkbox" name="ids" value="{action_id}"' in page.text
    # Failed actions can be retried, not cancelled: only "retry" is offered, here and for all
    assert '<button type="submit" name="verb" value="retry"' in page.text
    assert 'value="cancel"' not in page.text
    assert "Cancel all matching" not in page.text
    assert "Retry all matching" in page.text
    # A viewer has no checkbox
    assert 'name="ids"' not in viewer_client.get("/actions/?status=failed").text


def test_the_confirmation_counts_the_selected_actions(
    operator_client: StudioClient, session: Session, car: Car
) -> None:
    failed = given_failed_paint_jobs(car)
    drive = engine.now(car, "drive", 5)
    picked = [failed[0], failed[2], drive.id]

    answer = operator_client.get(
        "/actions/bulk/confirm?verb=retry&" + "&".join(f"ids={i}" for i in picked), headers=HTMX
    )

    assert answer.status_code == 200
    text = words(re.sub(r"<[^>]+>", "", answer.text))
    assert "Retry the 3 selected actions?" in text
    assert "2 of the 3 selected actions are failed, timed out or cancelled and will be retried" in text
    (form,) = [f for f in forms(answer.text) if f.action == "/actions/bulk"]
    assert form.inputs["ids"] == ",".join(map(str, picked))
    assert form.inputs["verb"] == "retry"


def test_retrying_the_selected_ones_reopens_only_those_in_one_audit_entry(
    operator_client: StudioClient, session: Session, car: Car, app: Flask
) -> None:
    failed = given_failed_paint_jobs(car)

    answer = operator_client.command(
        "/actions/bulk", {"verb": "retry", "ids": f"{failed[0]},{failed[2]}", "reason": "paint restocked"}
    )
    entry_id = entry_id_in(answer.text)
    run_bulk_jobs()

    # Then the two ticked are back in their lanes; the third is still failed
    assert statuses(session, failed)[1] == "failed"
    assert set(statuses(session, [failed[0], failed[2]])) <= {"pending", "performing", "failed"}
    session.expire_all()
    (entry,) = session.scalars(select(AuditEntry)).all()
    assert (entry.command, entry.total, entry.done, entry.reason) == ("bulk_retry", 2, 2, "paint restocked")
    assert entry.data["filter"] == {"ids": [failed[0], failed[2]]}
    # And the progress shows the selection, and links to it
    progress = operator_client.get(f"/actions/bulk/{entry_id}")
    assert "selected ids" in progress.text
    assert f'href="/actions/?ids={failed[0]},{failed[2]}"' in progress.text


def test_cancelling_the_selected_ones_leaves_the_others_running(
    operator_client: StudioClient, session: Session, car: Car, app: Flask
) -> None:
    engine.define(Car, "wait", lambda car, n: None, outbound=True, concurrency_key=lambda car, n: f"w/{n}")
    waiting = [engine.now(car, "wait", n).id for n in range(3)]

    operator_client.command("/actions/bulk", {"verb": "cancel", "ids": str(waiting[1])})
    run_bulk_jobs()

    assert statuses(session, waiting) == ["performing", "cancelled", "performing"]


def test_bad_or_too_many_ids_are_refused_and_change_nothing(
    operator_client: StudioClient, session: Session, car: Car
) -> None:
    failed = given_failed_paint_jobs(car, 1)
    too_many = ",".join(str(i) for i in range(1, action_filters.MAX_IDS + 2))

    bad = operator_client.command("/actions/bulk", {"verb": "retry", "ids": f"{failed[0]},x"})
    many = operator_client.command("/actions/bulk", {"verb": "retry", "ids": too_many})
    listed = operator_client.get("/actions/?ids=12,abc")

    assert bad.status_code == 400
    assert "Not an action id: &#39;x&#39;" in bad.text
    assert many.status_code == 400
    assert f"At most {action_filters.MAX_IDS} actions at a time" in many.text
    assert listed.status_code == 400
    assert statuses(session, failed) == ["failed"]
    session.expire_all()
    assert session.scalars(select(AuditEntry)).all() == []
