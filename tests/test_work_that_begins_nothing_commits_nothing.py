"""``db.retrying`` commits what its work began or left pending, and nothing else: a step
body that wrote nothing rolls back, and its session is not committed again empty (an
empty commit begins and ends a transaction of the session's own and sends its events:
~12 µs of a worker's CPU per such body)."""

from __future__ import annotations

from sqlalchemy import event, select
from sqlalchemy.orm import Session

from engine import broker, db
from tests.domain import Car


def commits_of(session: Session) -> list[Session]:
    seen: list[Session] = []
    event.listen(session, "after_commit", seen.append)
    return seen


def test_work_that_begins_nothing_commits_nothing() -> None:
    with db.session() as session:
        commits = commits_of(session)
        assert db.retrying(session, lambda: "ran", lock=False) == "ran"
        assert commits == []


def test_work_that_rolled_back_its_reads_commits_nothing() -> None:
    with db.session() as session:
        commits = commits_of(session)

        def read_then_roll_back() -> int:
            count = len(session.scalars(select(Car)).all())
            session.rollback()
            return count

        db.retrying(session, read_then_roll_back, lock=False)
        assert commits == []


def test_work_that_left_objects_pending_commits_them() -> None:
    with db.session() as session:
        commits = commits_of(session)
        db.retrying(session, lambda: session.add(Car(mileage=7)), lock=False)
        assert len(commits) == 1
    with db.session() as session:
        assert [car.mileage for car in session.scalars(select(Car))] == [7]


def test_work_that_left_a_message_for_the_commit_sends_it() -> None:
    sent: list[str] = []
    with db.session() as session:
        db.retrying(session, lambda: broker.after_commit(session, lambda: sent.append("sent")), lock=False)
    assert sent == ["sent"]
