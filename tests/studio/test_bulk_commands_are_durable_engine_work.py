"""Given a bulk command confirmed in the studio, it runs as durable engine work: a worker's
job (``stepwise.bulk_run``) with its cursor and progress in the database, not a thread of
the web process. A web process that restarts neither loses nor orphans it; a run cut short
resumes where it got to, and a message delivered twice acts on no action twice; a run
whose message was lost is sent again once it is stale.

Not a spec case: the studio is ours (issue 12, "Act on what you select": bulk commands as
durable engine work).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from flask import Flask
from sqlalchemy import func, select
from sqlalchemy.orm import Session

import engine
from app import create_app
from app.database import db
from engine import broker, bulk_work, clock, testing
from engine.audit import AuditEntry
from engine.bulk_run import BulkRun
from engine.history import ActionEvent
from engine.models import Action
from tests.domain import Car
from tests.studio.conftest import TEST_CONFIG
from tests.studio.support import StudioClient
from tests.sweeper_scenarios import lose_messages


def order_paint(car: Car, n: int) -> None:
    """The paint shop is asked; it completes the action from outside."""


@pytest.fixture
def five_paint_jobs(session: Session, car: Car) -> list[int]:
    """Five outbound paint jobs, each in its own lane, waiting (performing)."""
    engine.define(Car, "paint", order_paint, outbound=True, concurrency_key=lambda car, n: f"paint/{n}")
    return [engine.now(car, "paint", n).id for n in range(5)]


def statuses(session: Session, ids: list[int]) -> list[str]:
    session.expire_all()
    found = dict(session.execute(select(Action.id, Action.status).where(Action.id.in_(ids))).all())
    return [found[i] for i in ids]


def the_entry(session: Session) -> AuditEntry:
    session.expire_all()
    (entry,) = session.scalars(select(AuditEntry)).all()
    return entry


def bulk_jobs() -> int:
    return testing.drain(only=lambda item: item.job == bulk_work.BULK_RUN)


def completions(session: Session) -> int:
    """Completion entries in the actions' history (one per action completed)."""
    return session.scalar(select(func.count()).where(ActionEvent.event == "completed")) or 0


def test_the_web_process_only_records_the_command_and_a_worker_performs_it(
    app: Flask, operator_client: StudioClient, five_paint_jobs: list[int], session: Session
) -> None:
    # When the operator confirms "cancel all matching"
    answer = operator_client.command("/actions/bulk", {"verb": "cancel", "name": "paint"})

    # Then nothing is cancelled yet: the command is a run in the database and a message
    assert answer.status_code == 200
    assert statuses(session, five_paint_jobs) == ["performing"] * 5
    entry = the_entry(session)
    (run,) = session.scalars(select(BulkRun)).all()
    assert (run.audit_entry_id, run.command, run.filter) == (entry.id, "cancel", {"name": "paint"})
    assert run.last_id == 0
    assert [m.job for m in testing.enqueued(bulk_work.BULK_RUN)] == [bulk_work.BULK_RUN]

    # When the web process goes away (a deploy restarts it) and a new one starts
    with app.app_context():
        db.session.remove()
        db.engine.dispose()
    restarted = create_app({**TEST_CONFIG, "DATABASE_URL": str(app.config["DATABASE_URL"])})

    # Then a worker performs the command all the same, and the new process shows it finished
    assert bulk_jobs() == 1
    assert statuses(session, five_paint_jobs) == ["cancelled"] * 5
    entry = the_entry(session)
    assert (entry.total, entry.done, entry.result) == (5, 5, "done")
    assert entry.finished_at is not None
    with restarted.test_request_context():
        run = bulk_work.run_of(db.session, entry.id)
        assert run is not None and run.finished_at is not None and run.last_id == five_paint_jobs[-1]


def test_a_run_cut_short_resumes_at_its_cursor_and_a_second_delivery_repeats_nothing(
    five_paint_jobs: list[int], session: Session
) -> None:
    entry_id = bulk_work.start("cancel", bulk_work.BulkFilter(name="paint"), by="olga")
    (run,) = session.scalars(select(BulkRun)).all()
    lose_messages()

    # When a worker does one batch of two and hands the rest on (its time slice is over)
    bulk_work.run(run.id, batch_size=2, budget=timedelta(0))
    assert statuses(session, five_paint_jobs) == ["cancelled"] * 2 + ["performing"] * 3
    # and the same message is delivered a second time meanwhile
    broker.send(bulk_work.BULK_RUN, run.id)

    # Then the rest is done from the cursor, once
    assert bulk_jobs() >= 2
    assert statuses(session, five_paint_jobs) == ["cancelled"] * 5
    assert completions(session) == 5
    entry = session.get(AuditEntry, entry_id, populate_existing=True)
    assert entry is not None
    assert (entry.total, entry.done, entry.result) == (5, 5, "done")


def test_a_run_whose_message_was_lost_is_sent_again_once_stale(
    five_paint_jobs: list[int], session: Session
) -> None:
    testing.freeze()
    entry_id = bulk_work.start("cancel", bulk_work.BulkFilter(ids=tuple(five_paint_jobs[:2])), by="olga")
    lose_messages()

    # Not yet stale: left alone
    assert bulk_work.resend_stale(session) == []
    clock.travel(bulk_work.STALE + timedelta(seconds=1))
    (run_id,) = bulk_work.resend_stale(session)

    assert bulk_jobs() == 1
    assert statuses(session, five_paint_jobs) == ["cancelled"] * 2 + ["performing"] * 3
    entry = session.get(AuditEntry, entry_id, populate_existing=True)
    assert entry is not None and entry.data["filter"] == {"ids": five_paint_jobs[:2]}
    assert bulk_work.resend_stale(session) == []  # finished runs are never sent again
    assert run_id


def test_the_progress_page_says_when_a_run_has_stopped_moving(
    operator_client: StudioClient, five_paint_jobs: list[int], session: Session
) -> None:
    testing.freeze()
    answer = operator_client.command("/actions/bulk", {"verb": "cancel", "name": "paint"}, htmx=False)
    clock.travel(bulk_work.STALE + timedelta(seconds=1))

    page = operator_client.get(answer.headers["Location"])

    assert "Not moving since" in page.text
    assert "is a worker running?" in page.text
    bulk_jobs()
    assert "Not moving since" not in operator_client.get(answer.headers["Location"]).text


def test_the_filter_a_run_reads_back_is_the_one_it_was_given() -> None:
    given = bulk_work.BulkFilter(
        status="failed",
        name="paint",
        roots_only=True,
        created_after=clock.now().replace(microsecond=0),
        error_class="builtins.RuntimeError",
        outbound_only=True,
        ids=(3, 1, 2),
    )

    assert bulk_work.BulkFilter.from_description(given.describe()) == given
